#include "kintsugi/train/layout_config.hpp"

#include <fmt/format.h>


namespace kintsugi {

Workload workload_of(const RunConfig& c) {
  return {.model = c.model,
          .global_batch = c.train.global_batch,
          .precision = c.train.precision,
          .grad_precision = c.train.grad_precision,
          .bucket_mib = c.parallel.bucket_mib};
}

Layout layout_of(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  return {.tp = p.tp, .pp = p.pp, .dp = p.dp, .micro_batch = c.train.micro_batch,
          .schedule = p.schedule, .virtual_stages = p.virtual_stages,
          .zero = p.zero, .hsdp = p.hsdp, .recompute = c.train.recompute,
          .sequence_parallel = p.sequence_parallel, .tensor_grid = p.tensor_grid,
          .grid_overlap = p.tensor_grid_overlap};
}

std::string layout_config_toml(const RunConfig& base, const Layout& l) {
  RunConfig c = base;
  ParallelConfig& p = c.parallel;
  p.tp = l.tp;
  p.pp = l.pp;
  p.dp = l.dp;
  p.schedule = l.schedule;
  p.virtual_stages = l.virtual_stages;
  p.sequence_parallel = l.sequence_parallel;
  p.zero = l.zero;
  p.hsdp = l.hsdp;
  // A grid, with its overlap; a 1D layout clears the base's grid (and keeps its overlap
  // setting, which only a grid reads).
  p.tensor_grid = l.tensor_grid;
  if (!l.tensor_grid.empty()) p.tensor_grid_overlap = l.grid_overlap;
  if (p.pp != base.parallel.pp) p.layers_per_stage.clear();  // one entry per stage
  c.train.micro_batch = l.micro_batch;
  c.train.recompute = l.recompute;
  return fmt::format("# Layout {}: {} ranks\n\n", describe(l), l.world()) + run_config_toml(c);
}

}  // namespace kintsugi
