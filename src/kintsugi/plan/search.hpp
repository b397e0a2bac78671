#pragma once
// The planner's search: every layout the runtime accepts for a workload on `world` devices,
// predicted by the cost model, ranked by step time. Constraints pin dimensions (as when a
// user asks "what about tp 4, pp 2?").
#include <cstdint>
#include <optional>
#include <vector>

#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi {

// Pins: a dimension left empty takes every value, else only the values listed (`plan --zero
// 0,1`: a study's search space in one command).
struct SearchSpace {
  std::vector<std::int64_t> tp, pp, dp, micro_batch, virtual_stages, hsdp;
  // Micro-batches per replica and step (gradient accumulation: global batch / (mb x dp)).
  std::vector<std::int64_t> grad_accum;
  std::vector<ZeroStage> zero;
  std::vector<PipelineSchedule> schedule;
  std::vector<Recompute> recompute;
  std::vector<bool> sequence_parallel;
  // 3D tensor parallelism: whether 1D layouts and grid layouts are searched, and the grids
  // allowed (empty: every X x Y x Z = tp the model's shapes allow, parallel/layout_rules.hpp),
  // with their overlap (empty: on, the runtime's default).
  bool one_d = true, grids = true;
  std::vector<std::vector<std::int64_t>> tensor_grid;
  std::vector<bool> tensor_grid_overlap;
  std::int64_t max_micro_batch = 64;
  // Tensor parallelism, 1D or a grid, stays inside a node (Megatron-LM's rule) unless this is
  // set.
  bool tp_across_nodes = false;
};

struct SearchResult {
  std::int64_t enumerated = 0;       // valid layouts
  std::int64_t fitting = 0;          // of them, fitting in memory
  std::vector<Prediction> ranked;    // fitting layouts, fastest first
  std::vector<Prediction> too_big;   // the smallest-memory layouts that do not fit (up to 5)
};

// Every valid layout (layout_problem empty) within `space`: for each tp, the 1D layout and every
// grid X x Y x Z = tp (tp > 1) that the pins allow, each with every pp, dp, micro-batch,
// schedule, ZeRO stage, hybrid sharding and recomputation (sequence parallelism with 1D only).
std::vector<Layout> enumerate_layouts(const Workload& w, std::int64_t world,
                                      std::int64_t devices_per_node, const SearchSpace& space);
SearchResult search_layouts(const Workload& w, const ClusterSpec& cluster, std::int64_t world,
                            const SearchSpace& space);

}  // namespace kintsugi
