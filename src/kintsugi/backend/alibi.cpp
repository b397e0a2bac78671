// ALiBi slopes (Press et al., "Train Short, Test Long"), as BLOOM computes them.
#include <cmath>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {

double alibi_slope(std::int64_t head, std::int64_t heads) {
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
