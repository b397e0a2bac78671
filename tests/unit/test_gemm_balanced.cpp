// f32 GEMMs split into blocks that the threads take as they finish (backend/cpu/
// gemm_balanced.cpp) give the same bits with any number of threads, for every transpose
// combination, row and column splits, ragged blocks, products too small to split, beta 0 and 1,
// and leading dimensions wider than the matrices; and they compute the product (against f64).
// The bits are a function of the kernel OpenBLAS picks, so CTest runs these tests again under
// other kernels (OPENBLAS_CORETYPE, tests/CMakeLists.txt): a property that held for one kernel
// only would fail there.
#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi::cpu {
namespace {

struct GemmShape {
  std::int64_t m, n, k;
};

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(uniform_int_at(seed, 0, static_cast<std::int64_t>(i), 2001)) / 1000.0f - 1.0f;
  return v;
}

// C = 0.5 op(A) op(B) + beta C on padded matrices of fixed values.
struct GemmProblem {
  GemmShape s;
  bool ta, tb;
  float beta;
  std::int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  GemmProblem(GemmShape shape, bool ta_, bool tb_, float beta_)
      : s(shape), ta(ta_), tb(tb_), beta(beta_), lda((ta ? s.m : s.k) + 3),
        ldb((tb ? s.k : s.n) + 5), ldc(s.n + 2),
        a(values(static_cast<std::size_t>((ta ? s.k : s.m) * lda), 1)),
        b(values(static_cast<std::size_t>((tb ? s.n : s.k) * ldb), 2)),
        c0(values(static_cast<std::size_t>(s.m * ldc), 3)) {}
  std::vector<float> run(int threads) const {
    std::vector<float> c = c0;
    omp_set_num_threads(threads);
    gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }
  std::string name() const {
    return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
           " ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " beta " +
           std::to_string(beta);
  }
};

// 1000 rows and 1031 columns cut into ragged blocks; 2304 columns into many; 200 x 150 not cut
// at all (one call, which must not use OpenBLAS's own threads either).
const GemmShape kShapes[] = {{1000, 300, 77}, {256, 2304, 768}, {130, 1031, 64}, {200, 150, 300}};

TEST(GemmBalanced, SameBitsWithAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (const GemmShape s : kShapes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const float beta : {0.0f, 1.0f}) {
          const GemmProblem c(s, ta, tb, beta);
          const std::vector<float> one = c.run(1);
          for (const int threads : {2, 3, 4, 7}) {
            const std::vector<float> many = c.run(threads);
            EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
                << c.name() << ": " << threads << " threads";
          }
        }
  omp_set_num_threads(saved);
}

// Inside a parallel region (the attention kernels call GEMMs there) the blocks run on the
// calling thread, with the same bits.
TEST(GemmBalanced, SameBitsInsideAParallelRegion) {
  const int saved = omp_get_max_threads();
  const GemmProblem c(kShapes[1], false, true, 0.0f);
  const std::vector<float> one = c.run(1);
  std::vector<float> inside = c.c0;
  omp_set_num_threads(2);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    gemm(c.ta, c.tb, c.s.m, c.s.n, c.s.k, 0.5f, c.a.data(), c.lda, c.b.data(), c.ldb, c.beta,
         inside.data(), c.ldc);
  }
  EXPECT_EQ(std::memcmp(one.data(), inside.data(), one.size() * sizeof(float)), 0);
  omp_set_num_threads(saved);
}

TEST(GemmBalanced, ComputesTheProduct) {
  const int saved = omp_get_max_threads();
  for (const GemmShape s : kShapes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const GemmProblem c(s, ta, tb, 1.0f);
        const std::vector<float> got = c.run(3);
        double worst = 0;
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < s.n; ++j) {
            double sum = 0;
            for (std::int64_t p = 0; p < s.k; ++p)
              sum += double(ta ? c.a[p * c.lda + i] : c.a[i * c.lda + p]) *
                     double(tb ? c.b[j * c.ldb + p] : c.b[p * c.ldb + j]);
            const double want = 0.5 * sum + c.c0[i * c.ldc + j];
            worst = std::max(worst, std::abs(got[i * c.ldc + j] - want));
          }
        // |terms| <= 1: f32 rounding of k products and sums stays far below 1e-4 * k.
        EXPECT_LT(worst, 1e-5 * static_cast<double>(s.k) + 1e-5) << c.name();
        // Columns between rows untouched (leading dimensions wider than the matrices).
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = s.n; j < c.ldc; ++j)
            EXPECT_EQ(got[i * c.ldc + j], c.c0[i * c.ldc + j]) << c.name();
      }
  omp_set_num_threads(saved);
}

// Under OPENBLAS_CORETYPE (tests/CMakeLists.txt reruns these tests so), OpenBLAS must really
// run that kernel set: one built for a single CPU ignores the variable, and these tests would
// then only repeat the native run.
TEST(GemmBalanced, RunsOnTheRequestedKernel) {
  const char* requested = std::getenv("OPENBLAS_CORETYPE");
  const std::string running = openblas_get_corename();
  if (!requested) GTEST_SKIP() << "OpenBLAS runs its " << running << " kernels";
  std::string want = requested, got = running;
  for (std::string* t : {&want, &got})
    for (char& ch : *t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  EXPECT_EQ(got, want) << "OPENBLAS_CORETYPE=" << requested << " but OpenBLAS runs its "
                       << running << " kernels (is it built with DYNAMIC_ARCH?)";
}

}  // namespace
}  // namespace kintsugi::cpu
