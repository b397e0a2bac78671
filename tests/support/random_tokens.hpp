#pragma once
// Token ids drawn uniformly from [0, vocab), the same for the same seed on every machine.
#include <cstdint>
#include <vector>

#include "kintsugi/core/rng.hpp"

namespace kintsugi::testing {

inline std::vector<std::int32_t> random_tokens(std::int64_t n, std::int64_t vocab,
                                               std::uint64_t seed) {
  std::vector<std::int32_t> t(n);
  for (std::int64_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(uniform_int_at(seed, 0, i, vocab));
  return t;
}

}  // namespace kintsugi::testing
