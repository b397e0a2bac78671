#include "kintsugi/plan/critical_batch.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

double critical_batch_tokens(double loss, const CriticalBatchFit& fit) {
  if (!(loss > 0) || !std::isfinite(loss))
    fail("a critical batch needs a loss in nats per token > 0, got {}", loss);
  return fit.b_star_tokens / std::pow(loss, 1.0 / fit.alpha_b);
}

std::int64_t critical_batch_sequences(double loss, std::int64_t seq_len,
                                      const CriticalBatchFit& fit) {
  KINTSUGI_ASSERT(seq_len > 0);
  const double sequences = critical_batch_tokens(loss, fit) / static_cast<double>(seq_len);
  // A small loss makes B_crit astronomically large: saturated, never converted past the
  // integer's range (which made it a limit of 1 sequence).
  if (sequences >= static_cast<double>(kUnboundedCriticalBatch)) return kUnboundedCriticalBatch;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(sequences));
}

}  // namespace kintsugi
