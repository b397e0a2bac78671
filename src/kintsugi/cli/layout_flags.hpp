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

#include "kintsugi/core/layout_pins.hpp"

namespace kintsugi::cli {

// What the layout flags were given: config key -> the text after the flag ("" = not given).
using LayoutFlagValues = std::map<std::string, std::string>;

// The flag of a config key: parallel.virtual_stages -> --virtual-stages.
std::string flag_of(std::string_view key);

// train, eval and layout: one value per flag. `keys` names the config keys to offer (empty:
// every parallel.* key). Boolean keys are flags (--sequence-parallel, --sequence-parallel=false).
void add_layout_flags(CLI::App& command, LayoutFlagValues& values,
                      const std::vector<std::string>& keys = {});

// The given flags as config overrides ("parallel.tp=2"), applied after --set's so that flags
// win; a value the key's type cannot hold is refused naming the flag.
std::vector<std::string> layout_overrides(const LayoutFlagValues& values);

// plan: the same flags as pins, each one value or a comma-separated list of the values to try
// (numbers also ranges, plan/value_list.hpp; a list-valued key takes lists as words, none and
// any among them); `keys` names the keys the search can pin.
void add_layout_pins(CLI::App& command, LayoutFlagValues& pins,
                     const std::vector<std::string>& keys);

// Every key a layout search can pin: each field of the record a planner chooses
// (core/parallel_layout_json.hpp layout_fields).
std::vector<std::string> pinnable_keys();

// A pin's values in the record's form (field_text: "1f1b", "4", "[2,2,1]", "[]" for none, and
// LayoutPins::kAny), each checked against the record's ranges; a bad one refused naming its flag.
std::vector<std::string> pin_values(const LayoutFlagValues& pins, const std::string& key);

// The given pins as the search takes them (core/layout_pins.hpp).
LayoutPins layout_pins(const LayoutFlagValues& pins);

}  // namespace kintsugi::cli
