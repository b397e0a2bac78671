#pragma once
// A layout as JSON, the one form run.json, `eval --json` and `plan --json` write: every
// dimension of the record, named as its config key (parallel.virtual_stages is
// "virtual_stages"), so that a reader of one reads the others.
#include <nlohmann/json_fwd.hpp>

#include "kintsugi/core/parallel_layout.hpp"

namespace kintsugi {

nlohmann::json layout_json(const ParallelLayout& layout);

}  // namespace kintsugi
