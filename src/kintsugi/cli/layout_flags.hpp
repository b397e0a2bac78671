#pragma once
// The layout flags of train, eval, layout and plan, made from the config key table
// (train/run_config.hpp): one flag per `parallel.*` key, named after it (parallel.virtual_stages
// is --virtual-stages) and described by the key's own text, so that a knob has one name and one
// meaning in every command and in the config (docs/parallelism.md, "Layout flags").
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::cli {

// What the layout flags were given: config key -> the text after the flag ("" = not given).
using LayoutFlagValues = std::map<std::string, std::string>;

// The flag of a config key: parallel.tensor_grid_overlap -> --tensor-grid-overlap.
std::string flag_of(std::string_view key);

// train, eval and layout: one value per flag. `keys` names the config keys to offer (empty:
// every parallel.* key). Boolean keys are flags (--sequence-parallel, --sequence-parallel=false).
void add_layout_flags(CLI::App& command, LayoutFlagValues& values,
                      const std::vector<std::string>& keys = {});

// The given flags as config overrides ("parallel.tp=2"), applied after --set's so that flags
// win; a value the key's type cannot hold is refused naming the flag.
std::vector<std::string> layout_overrides(const LayoutFlagValues& values);

// plan: the same flags as pins, each one value or a comma-separated list of the values to try
// (numbers also ranges, plan/value_list.hpp); `keys` names the keys the search can pin.
void add_layout_pins(CLI::App& command, LayoutFlagValues& pins,
                     const std::vector<std::string>& keys);

// A pin's values as the list it names ("" gives none), e.g. "1f1b,interleaved".
std::vector<std::string> pin_list(const LayoutFlagValues& pins, const std::string& key);

}  // namespace kintsugi::cli
