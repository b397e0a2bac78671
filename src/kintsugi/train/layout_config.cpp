#include "kintsugi/train/layout_config.hpp"

#include <fmt/format.h>

namespace kintsugi {

Workload workload_of(const RunConfig& c) {
  return {.model = c.model,
          .global_batch = c.train.global_batch,
          .precision = c.train.precision,
          .grad_precision = c.train.grad_precision,
          .bucket_mib = c.comm.bucket_mib};
}

Layout layout_of(const RunConfig& c) {
  return {.parallel = c.parallel, .micro_batch = c.train.micro_batch,
          .recompute = c.train.recompute};
}

std::string layout_config_toml(const RunConfig& base, const Layout& l) {
  RunConfig c = base;
  c.parallel = l.parallel;
  // What the planner does not choose stays the base's: the rank order, the stage sizes (while
  // the layout has as many stages: one entry per stage), and, with a 1D layout, the grid
  // overlap setting, which only a grid reads.
  const ParallelLayout& b = base.parallel;
  c.parallel.order = b.order;
  c.parallel.layers_per_stage = b.layers_per_stage;
  if (l.parallel.pp != b.pp) c.parallel.layers_per_stage.clear();
  if (!l.parallel.has_grid()) c.parallel.tensor_grid_overlap = b.tensor_grid_overlap;
  c.train.micro_batch = l.micro_batch;
  c.train.recompute = l.recompute;
  return fmt::format("# Layout {}: {} ranks\n\n", describe(l), l.parallel.world()) +
         run_config_toml(c);
}

}  // namespace kintsugi
