#pragma once
// The one rule book of layouts: whether a job can train a model with a given split of its ranks
// and batch. The runtime (resolve_layout) and the planner (its search and pinned layouts) both
// ask layout_problem, so a layout the planner recommends is one the runtime accepts.
#include <cstdint>
#include <string>

#include "kintsugi/core/parallel_layout.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"

namespace kintsugi {

// A layout with the batch it splits.
struct LayoutSpec {
  ParallelLayout parallel;
  std::int64_t global_batch = 1, micro_batch = 1;  // sequences per step and per micro-batch
};

// Empty when the layout is valid for the model; otherwise one sentence saying what is wrong and
// which value to change: the record's own problem (ParallelLayout::problem), then what it
// demands of the model and the batch.
std::string layout_problem(const ModelConfig& model, const LayoutSpec& layout);

}  // namespace kintsugi
