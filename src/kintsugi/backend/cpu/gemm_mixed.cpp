#include "kintsugi/backend/cpu/gemm_mixed.hpp"

#include <omp.h>

#include <algorithm>

#include "kintsugi/backend/cpu/gemm_bf16.hpp"
#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu {

namespace {

// Bound on each f32 scratch block (result rows, widened operand slices): large enough that the
// GEMMs stay efficient, small enough that a 50k-vocabulary head needs no giant buffer (and that
// result rows are still in the last-level cache when the rounding pass reads them).
constexpr std::int64_t kChunkBytes = 16 << 20;

// Rows [r0, r0 + rows) x columns [c0, c0 + cols) of a stored f16 matrix, widened to f32 rows.
void widen_block(AnyPtr x, std::int64_t ld, std::int64_t r0, std::int64_t rows, std::int64_t c0,
                 std::int64_t cols, float* dst) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    widen(x.at((r0 + r) * ld + c0).half(), x.dtype, dst + r * cols, cols);
}

// The f32 product C = op(A) . op(B) + beta * C. f16 operands are widened one slice of the
// shared dimension at a time (later slices accumulate), so their f32 copies stay bounded. The
// products go through the balanced GEMM (gemm_balanced.cpp), whose bits do not depend on the
// thread count on any OpenBLAS kernel set; OpenBLAS's own threads split a product differently
// for each thread count, which changes bits under some kernel sets (Haswell's: 4% of an f16
// linear layer's outputs and weight gradients differed between 1 and 2 threads).
void product_f32(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixRef& a,
                 const MatrixRef& b, float beta, float* c, std::int64_t ldc, GrowBuffer& wa,
                 GrowBuffer& wb) {
  if (a.data.is_f32() && b.data.is_f32()) {
    sgemm_balanced(a.trans, b.trans, m, n, k, 1.0f, a.data.f32(), a.ld, b.data.f32(), b.ld, beta,
                   c, ldc);
    return;
  }
  const std::int64_t kc = std::min(k, std::max<std::int64_t>(256, kChunkBytes / (4 * (m + n))));
  float* a_wide = a.data.is_f32() ? nullptr : wa.get_as<float>(m * kc);
  float* b_wide = b.data.is_f32() ? nullptr : wb.get_as<float>(n * kc);
  for (std::int64_t k0 = 0; k0 < k; k0 += kc) {
    const std::int64_t kn = std::min(kc, k - k0);
    // op(A)[:, k0:k0+kn] is stored rows k0.. (trans) or columns k0.. of every row.
    const float* ap;
    std::int64_t lda;
    if (a_wide) {
      if (a.trans)
        widen_block(a.data, a.ld, k0, kn, 0, m, a_wide);
      else
        widen_block(a.data, a.ld, 0, m, k0, kn, a_wide);
      ap = a_wide;
      lda = a.trans ? m : kn;
    } else {
      ap = a.data.f32() + (a.trans ? k0 * a.ld : k0);
      lda = a.ld;
    }
    const float* bp;
    std::int64_t ldb;
    if (b_wide) {
      if (b.trans)
        widen_block(b.data, b.ld, 0, n, k0, kn, b_wide);
      else
        widen_block(b.data, b.ld, k0, kn, 0, n, b_wide);
      bp = b_wide;
      ldb = b.trans ? kn : n;
    } else {
      bp = b.data.f32() + (b.trans ? k0 : k0 * b.ld);
      ldb = b.ld;
    }
    sgemm_balanced(a.trans, b.trans, m, n, kn, 1.0f, ap, lda, bp, ldb, k0 == 0 ? beta : 1.0f, c,
                   ldc);
  }
}

}  // namespace

void gemm_mixed(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixRef& a,
                const MatrixRef& b, AnyPtr c, std::int64_t ldc, bool accumulate,
                const AnyPtr* bias, GemmWorkspace& ws) {
  if (m == 0 || n == 0) return;
  const bool in_bf16 = a.data.dtype == DType::bf16 || b.data.dtype == DType::bf16;
  const int threads = omp_get_max_threads();
  const float* bias32 = nullptr;
  if (bias) bias32 = read_f32(*bias, n, ws.bias_.get_as<float>(n));

  // Rows [r0, r0 + rows) of the product into cc (f32, leading dimension ldcc).
  auto product = [&](std::int64_t r0, std::int64_t rows, float beta, float* cc,
                     std::int64_t ldcc) {
    MatrixRef ar = a;
    ar.data = a.data.at(a.trans ? r0 : r0 * a.ld);
    if (in_bf16) {
      const bf16gemm::Operand ao{ar.data.data, ar.data.dtype, ar.ld, ar.trans};
      const bf16gemm::Operand bo{b.data.data, b.data.dtype, b.ld, b.trans};
      std::byte* scratch = ws.pack_.get(bf16gemm::scratch_bytes(threads));
      bf16gemm::gemm(rows, n, k, 1.0f, ao, bo, beta, cc, ldcc, scratch, threads);
    } else {
      product_f32(rows, n, k, ar, b, beta, cc, ldcc, ws.a_, ws.b_);
    }
  };

  if (c.is_f32()) {  // the product lands in C itself; the bias is one more pass, as in f32
    float* cf = c.f32();
    product(0, m, accumulate ? 1.0f : 0.0f, cf, ldc);
    if (bias32) {
#pragma omp parallel for schedule(static)
      for (std::int64_t r = 0; r < m; ++r) {
        float* row = cf + r * ldc;
#pragma omp simd
        for (std::int64_t j = 0; j < n; ++j) row[j] += bias32[j];
      }
    }
    return;
  }
  // A 16-bit C: chunks of rows computed in f32 scratch, then bias and rounding in one pass.
  const std::int64_t chunk = std::clamp<std::int64_t>(kChunkBytes / (4 * n), 1, m);
  float* scratch = ws.c_.get_as<float>(chunk * n);
  for (std::int64_t r0 = 0; r0 < m; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, m - r0);
    if (accumulate) {
#pragma omp parallel for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r)
        widen(c.at((r0 + r) * ldc).half(), c.dtype, scratch + r * n, n);
    }
    product(r0, rows, accumulate ? 1.0f : 0.0f, scratch, n);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = scratch + r * n;
      if (bias32) {
#pragma omp simd
        for (std::int64_t j = 0; j < n; ++j) row[j] += bias32[j];
      }
      narrow(row, c.dtype, c.at((r0 + r) * ldc).half(), n);
    }
  }
}

}  // namespace kintsugi::cpu
