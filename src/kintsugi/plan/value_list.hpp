#pragma once
// The values a planner option takes: one whole number, a comma-separated list, or ranges
// (docs/planner.md, "Searching a campaign"): `A:B` every number from A to B, `A:B:S` from A in
// steps of S, `A:B:xF` from A, each F times the one before, up to B. Items mix: `1,4:16:x2`.
#include <cstdint>
#include <string>
#include <vector>

namespace kintsugi {

// The values in order of appearance without repeats; a malformed item, a value below
// `minimum`, an empty or reversed range, a step below 1 or a factor below 2 is an Error naming
// `flag` and the item.
std::vector<std::int64_t> parse_values(const std::string& text, const std::string& flag,
                                       std::int64_t minimum);

}  // namespace kintsugi
