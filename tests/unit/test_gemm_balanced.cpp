// f32 GEMMs split into blocks that the threads take as they finish (backend/cpu/
// gemm_balanced.cpp) give the very bits of one single-threaded call, for every transpose
// combination, row and column splits, ragged blocks, beta 0 and 1, and leading dimensions wider
// than the matrices: the split changes who computes an element, never how.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi::cpu {
namespace {

struct Shape {
  std::int64_t m, n, k;
};

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(uniform_int_at(seed, 0, static_cast<std::int64_t>(i), 2001)) / 1000.0f - 1.0f;
  return v;
}

TEST(GemmBalanced, EqualsOneCallBitForBit) {
  const int saved = omp_get_max_threads();
  for (const Shape s : {Shape{1000, 300, 77}, Shape{256, 2304, 768}, Shape{130, 1031, 64}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          const std::int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 5,
                             ldc = s.n + 2;
          const auto a = values(static_cast<std::size_t>((ta ? s.k : s.m) * lda), 1);
          const auto b = values(static_cast<std::size_t>((tb ? s.n : s.k) * ldb), 2);
          const auto c0 = values(static_cast<std::size_t>(s.m * ldc), 3);
          std::vector<float> one = c0, split = c0;
          omp_set_num_threads(1);
          gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, beta, one.data(), ldc);
          omp_set_num_threads(4);
          gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, beta, split.data(), ldc);
          EXPECT_EQ(std::memcmp(one.data(), split.data(), one.size() * sizeof(float)), 0)
              << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb << " beta "
              << beta;
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace kintsugi::cpu
