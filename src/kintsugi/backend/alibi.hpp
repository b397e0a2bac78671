#pragma once
// ALiBi slopes (Press et al., "Train Short, Test Long"), as BLOOM computes them. Inline: every
// backend's attention kernel needs them, and backend implementations use only the headers of
// backend/.
#include <cmath>
#include <cstdint>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

// ALiBi's slope of head `head` (0-based) among `heads`: 2^(-8 (i + 1) / n) for n a power of
// two; otherwise the slopes of the largest power of two below n, then every other slope of twice
// that power for the remaining heads (what BLOOM does).
inline double alibi_slope(std::int64_t head, std::int64_t heads) {
  KINTSUGI_ASSERT(heads > 0 && head >= 0 && head < heads);
  std::int64_t pow2 = 1;  // the largest power of two <= heads
  while (pow2 * 2 <= heads) pow2 *= 2;
  const double p = static_cast<double>(pow2);
  // The first pow2 heads: 2^(-8/p), 2^(-16/p), ...
  if (head < pow2) return std::exp2(-8.0 * static_cast<double>(head + 1) / p);
  // The rest interleave between them: the odd powers of 2^(-8/(2p)).
  const double j = static_cast<double>(head - pow2);
  return std::exp2(-8.0 * (2.0 * j + 1.0) / (2.0 * p));
}

}  // namespace kintsugi
