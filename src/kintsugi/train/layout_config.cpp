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
  c.parallel = l.parallel.planned_over(base.parallel);
  c.train.micro_batch = l.micro_batch;
  c.train.recompute = l.recompute;
  return fmt::format("# Layout {}: {} ranks\n\n", describe(l), l.parallel.world()) +
         run_config_toml(c);
}

}  // namespace kintsugi
