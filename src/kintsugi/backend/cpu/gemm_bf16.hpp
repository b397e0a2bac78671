#pragma once
// bf16 x bf16 -> f32 matrix products. The OpenBLAS we build against declares cblas_sbgemm but the
// Debian library does not export it, so this is our own: a 12 x 32 register-tile kernel on
// AVX512-BF16's dot-product instruction (two bf16 products summed into an f32 lane per step),
// with a plain f32 fallback for CPUs without it. Accumulation is f32 in both; the instruction
// treats subnormal bf16 inputs and f32 results as zero, which the fallback does not.
//
// A product needs its right operand "packed": op(B) cut into panels of kNR columns, each panel
// holding, for every pair of consecutive k, the two bf16 of each column as one 32-bit word. The
// left operand is either a bf16 row-major matrix used in place (rows of whole k-pairs) or packed
// the same way in panels of kMR rows. Attention packs a head's keys and values once and reuses
// them for every query block; gemm() below does the blocking for one large product.
#include <cstddef>
#include <cstdint>

#include "kintsugi/core/dtype.hpp"

namespace kintsugi::cpu::bf16gemm {

inline constexpr std::int64_t kMR = 12, kNR = 32;

// A matrix operand as stored: op(X)[r][c] = trans ? x[c * ld + r] : x[r * ld + c]. Elements are
// bf16, or f32 / f16 that packing rounds to bf16 (nearest even).
struct Operand {
  const void* data = nullptr;
  DType dtype = DType::bf16;
  std::int64_t ld = 0;
  bool trans = false;
  // The operand whose op(.) starts at row r, column c of this one's op(.).
  Operand at(std::int64_t r, std::int64_t c) const;
};

inline std::int64_t pairs(std::int64_t k) { return (k + 1) / 2; }
// 32-bit words of a packed op(B)[k, n] (panels zero-padded to kNR columns and even k).
inline std::int64_t packed_b_words(std::int64_t k, std::int64_t n) {
  return (n + kNR - 1) / kNR * kNR * pairs(k);
}
inline std::int64_t packed_a_words(std::int64_t m, std::int64_t k) {
  return (m + kMR - 1) / kMR * kMR * pairs(k);
}
// Packs op(B)[0:k, 0:n] / op(A)[0:m, 0:k] (use Operand::at for other origins).
void pack_b(const Operand& b, std::int64_t k, std::int64_t n, std::uint32_t* dst);
void pack_a(const Operand& a, std::int64_t m, std::int64_t k, std::uint32_t* dst);

// The left operand of multiply(): packed panels (panel_pairs = the k-pairs each panel was packed
// with), or bf16 rows used in place (panel_pairs = 0; row_stride in words, 4-byte aligned rows).
// In-place rows are read in whole pairs: with an odd k the element after each row's last one is
// read too and must be finite (it meets zero padding in B).
struct Left {
  const std::uint32_t* words = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t panel_pairs = 0;
};
// C[m, n] = alpha * A[m, k] . B[k, n] + beta * C (beta == 0: C is not read). b_pairs is the
// k-pairs B's panels were packed with (k may use a prefix of them). Runs on the calling thread.
void multiply(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Left& a,
              const std::uint32_t* b, std::int64_t b_pairs, float beta, float* c,
              std::int64_t ldc);

// A whole product C[m, n] = alpha * op(A) . op(B) + beta * C with C f32, blocked for the caches.
// Called outside a parallel region it runs on `threads` OpenMP threads (same result for any
// count: each C tile is summed in the same order). `scratch` holds scratch_bytes(threads).
std::size_t scratch_bytes(int threads);
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Operand& a,
          const Operand& b, float beta, float* c, std::int64_t ldc, std::byte* scratch,
          int threads);

}  // namespace kintsugi::cpu::bf16gemm
