#pragma once
// The planner's search: every layout the runtime accepts for a workload on `world` devices,
// predicted by the cost model, ranked by step time. Constraints pin dimensions (as when a
// user asks "what about tp 4, pp 2?").
#include <cstdint>
#include <optional>
#include <vector>

#include "kintsugi/core/layout_pins.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi {

// Pins: a field of the layout record pinned takes only the values listed (`plan --zero 0,1`: a
// study's search space in one command), any other every value; the planner's own fields
// (micro-batch, accumulation, recomputation) likewise.
struct SearchSpace {
  LayoutPins pins;
  std::vector<std::int64_t> micro_batch;
  // Micro-batches per replica and step (gradient accumulation: global batch / (mb x dp)).
  std::vector<std::int64_t> grad_accum;
  std::vector<Recompute> recompute;
  std::int64_t max_micro_batch = 64;
  // Tensor parallelism, 1D or a grid, stays inside a node (Megatron-LM's rule) unless this is
  // set or the pins name the grid.
  bool tp_across_nodes = false;
};

struct SearchResult {
  std::int64_t enumerated = 0;       // valid layouts
  std::int64_t fitting = 0;          // of them, fitting in memory
  std::vector<Prediction> ranked;    // fitting layouts, fastest first
  std::vector<Prediction> too_big;   // the smallest-memory layouts that do not fit (up to 5)
};

// Every valid layout (layout_problem empty) within `space`: each tensor split of each tp
// (core/parallel_layout.hpp tensor_splits) with every pp, dp, micro-batch, schedule, refinement
// (ZeRO, its sharding groups, sequence parallelism, a grid's overlap) and recomputation.
std::vector<Layout> enumerate_layouts(const Workload& w, std::int64_t world,
                                      std::int64_t devices_per_node, const SearchSpace& space);
SearchResult search_layouts(const Workload& w, const ClusterSpec& cluster, std::int64_t world,
                            const SearchSpace& space);

}  // namespace kintsugi
