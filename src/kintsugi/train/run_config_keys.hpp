#pragma once
// The one table of run-config keys (run_config.hpp): each key's path, the RunConfig field it
// sets and its documentation, with how a field's value is read from TOML, written back and
// shown. load_run_config, run_config_toml, config_changes and run_config_keys all walk it, so
// a key declared here is read, written, compared and documented alike.
#include <cstdint>
#include <string>
#include <toml++/toml.h>
#include <variant>
#include <vector>

#include "kintsugi/train/run_config.hpp"

namespace kintsugi::config_keys {

// A key's field. Enumerations are TOML strings holding one of their names (parse_choice).
using Target = std::variant<std::int64_t*, double*, std::string*, bool*, std::vector<std::int64_t>*,
                            Device*, Precision*, GradPrecision*, Recompute*, PipelineSchedule*,
                            Family*, RopeScaling*, TiedHead*, RouterScore*, ZeroStage*, CommBackend*, LrShape*, OptimizerKind*,
                            CpComm*>;

struct Key {
  std::string path;
  Target target;
  std::string doc;
};

// Every key of `c`, pointing into it. "model.preset" is handled before these: it sets every
// model field, which the model.* keys then override.
std::vector<Key> keys_of(RunConfig& c);

// The key's TOML type as the docs name it ("integer", "float", "string", ...).
std::string type_name(const Target& t);
// The field's value as the config file writes it.
std::string value_text(const Target& t);
// Sets the key's field from a TOML node, or fails naming `source`, the key and the node.
void assign(const Key& key, const toml::node& node, const std::string& source);
// The key's value as a TOML node.
void insert_value(toml::table& table, const std::string& name, const Target& target);

}  // namespace kintsugi::config_keys
