#pragma once
// Scalar building blocks of the CPU kernels, written so that GCC vectorizes the loops that call
// them (no libm calls in hot loops: glibc only exposes its vector math under -ffast-math, which
// we refuse because it breaks inf/NaN checks). f64 uses libm: it serves gradient checks, where
// accuracy matters and speed does not.
#include <cblas.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace kintsugi::cpu {

// exp(x) for floats: 2^n * p(r) with |r| <= ln2/2 and a degree-7 Taylor polynomial
// (relative error below 2e-7 over the range that does not underflow).
inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = (x * kLog2e + kRound) - kRound;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
inline double exp_fast(double x) { return std::exp(x); }

inline float tanh_fast(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1); exp_fast saturates, so large |x| gives exactly +-1.
  return 1.0f - 2.0f / (exp_fast(2.0f * x) + 1.0f);
}
inline double tanh_fast(double x) { return std::tanh(x); }

// Row-major GEMM: C[M,N] = alpha * op(A) . op(B) + beta * C. f32 products go through
// sgemm_balanced (gemm_balanced.cpp): blocks that the compute threads take as they finish.
void sgemm_balanced(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                    float beta, float* c, std::int64_t ldc);
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc) {
  sgemm_balanced(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                 double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace kintsugi::cpu
