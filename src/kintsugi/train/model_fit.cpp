#include "kintsugi/train/model_fit.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/precision.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/memory.hpp"

namespace kintsugi {

namespace {

std::string bytes_text(double bytes) {
  if (bytes >= 1e12) return fmt::format("{:.3g} TB", bytes / 1e12);
  if (bytes >= 1e9) return fmt::format("{:.3g} GB", bytes / 1e9);
  return fmt::format("{:.3g} MB", bytes / 1e6);
}

}  // namespace

void check_model_fits(const RunConfig& c, double memory_bytes, int ranks_sharing) {
  if (memory_bytes <= 0) return;
  const ModelConfig& m = c.model;
  const ParallelLayout& p = c.parallel;
  const double parameters = parameter_count_double(m);
  const double split = static_cast<double>(p.tp) * static_cast<double>(p.pp);
  const Precision precision = c.train.precision;
  const StateBytes per_rank = model_state_bytes(
      parameters / split, stage_number(p.zero), p.shards(), element_bytes(precision),
      static_cast<std::int64_t>(size_of(grad_dtype(precision, c.train.grad_precision))),
      is_mixed(precision), c.train.optimizer == OptimizerKind::lion ? 1 : 2);
  const double available = memory_bytes / std::max(1, ranks_sharing);
  if (per_rank.total() <= available) return;
  fail("the model does not fit: its {:.3g} parameters (model.n_layer = {}, model.d_model = {}, "
       "model.d_ff = {}, model.vocab_size = {}) take at least {} of weights, gradients and "
       "optimizer state per rank at tp {} x pp {}, ZeRO {}, more than the {} {} has{}: shrink "
       "the model or spread it over more ranks (--tp, --pp, --zero 3)",
       parameters, m.n_layer, m.d_model, m.d_ff, m.vocab_size, bytes_text(per_rank.total()), p.tp,
       p.pp, stage_number(p.zero), bytes_text(memory_bytes),
       c.train.device == Device::cpu ? "this machine" : "this GPU",
       ranks_sharing > 1 ? fmt::format(" for its {} ranks", ranks_sharing) : "");
}

}  // namespace kintsugi
