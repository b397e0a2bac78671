#pragma once
// The record's fields by name: a layout as JSON, the one form run.json, `eval --json` and `plan
// --json` write, and each field read or set by its name, which is its config key without
// "parallel." (parallel.virtual_stages is "virtual_stages"). Whatever iterates a layout's
// dimensions (the planner's pins, the plan flags) asks these instead of naming fields, so a new
// dimension is one entry in this file's table besides its field.
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/core/parallel_layout.hpp"

namespace kintsugi {

nlohmann::json layout_json(const ParallelLayout& layout);

// The fields in the struct's order; `chosen_only`: those a planner chooses (not the rank order
// nor the stage sizes, which a run sets).
std::vector<std::string> layout_fields(bool chosen_only);

// A field's value as a user writes it: a number, true or false, a name (1f1b), a list [2,2,1]
// ([] when empty). A name that is no field is a kintsugi::Error.
std::string field_text(const ParallelLayout& layout, std::string_view field);

// Sets a field from that text; a text its type cannot hold is a kintsugi::Error naming
// parallel.<field> (ranges are value_problem's).
void set_field(ParallelLayout& layout, std::string_view field, const std::string& text);

}  // namespace kintsugi
