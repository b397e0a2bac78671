#include "kintsugi/backend/cpu/gemm_bf16.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kintsugi/backend/cpu/convert.hpp"
#include "kintsugi/core/error.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace kintsugi::cpu::bf16gemm {

namespace {

// Blocking of gemm(): a kKC x kNC block of B (packed, shared by the threads) and, per thread, a
// kMC x kKC block of A. The 24 KiB B micro-panel (kKC x kNR) stays in L1 while a thread's A
// block (144 KiB, L2) streams past it.
constexpr std::int64_t kKC = 384, kMC = 16 * kMR, kNC = 4096;
constexpr std::size_t kAreaA = kMC * kKC * sizeof(std::uint16_t);

// Readers turning a stored element into bf16 bits.
struct FromBf16 {
  using Elem = std::uint16_t;
  static std::uint16_t get(std::uint16_t v) { return v; }
};
struct FromF16 {
  using Elem = std::uint16_t;
  static std::uint16_t get(std::uint16_t v) { return f32_to_bf16(f16_to_f32(v)); }
};
struct FromF32 {
  using Elem = float;
  static std::uint16_t get(float v) { return f32_to_bf16(v); }
};

template <class Fn>
void with_reader(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: fn.template operator()<FromBf16>(); return;
    case DType::f16: fn.template operator()<FromF16>(); return;
    case DType::f32: fn.template operator()<FromF32>(); return;
    default: KINTSUGI_ASSERT(!"bf16 GEMM operands are bf16, f16 or f32");
  }
}

// Packing `lines` lines (columns of op(B), rows of op(A)) into panels of W lines: word
// [p * W + l] of a panel holds line l's elements 2p (low half) and 2p + 1 (high half). Panels
// are zero-padded to W lines; their products land in C entries that are never stored.

#if defined(__AVX512F__)
// dst[c * dst_stride + i] = word c of row i, for 16 rows of 16 words (rows past `valid` read as
// zero): a 16 x 16 transpose in registers, for packing transposed bf16 operands.
void transpose_16x16(const std::uint16_t* src, std::int64_t src_ld, int valid, std::uint32_t* dst,
                     std::int64_t dst_stride) {
  // The zero-masked forms with an all-ones mask are the plain instructions; GCC 12's plain
  // intrinsics trip -Wuninitialized on their internal undefined operand.
  constexpr __mmask16 kAll = 0xffff;
  constexpr __mmask8 kAll8 = 0xff;
  __m512i r[16], a[16], b[16];
  for (int i = 0; i < 16; ++i)
    r[i] = i < valid ? _mm512_loadu_si512(src + i * src_ld) : _mm512_setzero_si512();
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_maskz_unpacklo_epi32(kAll, r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_maskz_unpackhi_epi32(kAll, r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane j, b[4i + q] holds word 4j + q of rows 4i..4i+3
    b[4 * i] = _mm512_maskz_unpacklo_epi64(kAll8, a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, a[4 * i + 1], a[4 * i + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // gather lane j of the four row groups into word 4j + q
    const __m512i s0 = _mm512_maskz_shuffle_i32x4(kAll, b[q], b[4 + q], 0x88);
    const __m512i s1 = _mm512_maskz_shuffle_i32x4(kAll, b[q], b[4 + q], 0xdd);
    const __m512i s2 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + q], b[12 + q], 0x88);
    const __m512i s3 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + q], b[12 + q], 0xdd);
    _mm512_storeu_si512(dst + q * dst_stride, _mm512_maskz_shuffle_i32x4(kAll, s0, s2, 0x88));
    _mm512_storeu_si512(dst + (q + 4) * dst_stride, _mm512_maskz_shuffle_i32x4(kAll, s1, s3, 0x88));
    _mm512_storeu_si512(dst + (q + 8) * dst_stride, _mm512_maskz_shuffle_i32x4(kAll, s0, s2, 0xdd));
    _mm512_storeu_si512(dst + (q + 12) * dst_stride, _mm512_maskz_shuffle_i32x4(kAll, s1, s3, 0xdd));
  }
}
#endif

// Lines whose k elements are adjacent in memory (line l at x + l * ld): a transpose of words.
template <class R, std::int64_t W>
void pack_k_contiguous(const typename R::Elem* x, std::int64_t ld, std::int64_t lines,
                       std::int64_t k, std::uint32_t* dst) {
  const std::int64_t kp = pairs(k), full = k / 2;
  for (std::int64_t l0 = 0; l0 < lines; l0 += W) {
    const std::int64_t w = std::min(W, lines - l0);
    std::uint32_t* panel = dst + l0 / W * kp * W;
    std::int64_t done = 0;  // pairs already packed for every line of the panel
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<R, FromBf16> && W % 16 == 0) {
      done = full / 16 * 16;
      for (std::int64_t h = 0; h < W; h += 16)
        for (std::int64_t p = 0; p < done; p += 16)
          transpose_16x16(x + (l0 + h) * ld + 2 * p, ld,
                          static_cast<int>(std::clamp<std::int64_t>(w - h, 0, 16)),
                          panel + p * W + h, W);
    }
#endif
    for (std::int64_t l = 0; l < w; ++l) {
      const typename R::Elem* line = x + (l0 + l) * ld;
      if constexpr (std::is_same_v<R, FromBf16>) {  // the pairs are already words
        for (std::int64_t p = done; p < full; ++p)
          std::memcpy(panel + p * W + l, line + 2 * p, sizeof(std::uint32_t));
      } else {
        for (std::int64_t p = done; p < full; ++p)
          panel[p * W + l] = R::get(line[2 * p]) | std::uint32_t(R::get(line[2 * p + 1])) << 16;
      }
      if (full < kp) panel[full * W + l] = R::get(line[2 * full]);
    }
    for (std::int64_t p = done; p < kp && w < W; ++p)
      std::fill(panel + p * W + w, panel + (p + 1) * W, 0u);
  }
}

// Lines that run along memory rows (element kk of line l at x + kk * ld + l): each k-pair
// interleaves two rows, a long vectorized loop over all lines, then is cut into the panels.
template <class R, std::int64_t W>
void pack_rows(const typename R::Elem* x, std::int64_t ld, std::int64_t lines, std::int64_t k,
               std::uint32_t* dst) {
  const std::int64_t kp = pairs(k), full = k / 2;
  constexpr std::int64_t kChunk = 64 * W;  // lines interleaved at a time, whole panels
  std::uint32_t words[kChunk];
  for (std::int64_t p = 0; p < kp; ++p) {
    const typename R::Elem* lo = x + 2 * p * ld;
    const typename R::Elem* hi = lo + ld;
    for (std::int64_t c0 = 0; c0 < lines; c0 += kChunk) {
      const std::int64_t n = std::min(kChunk, lines - c0);
      if (p < full) {
#pragma omp simd
        for (std::int64_t l = 0; l < n; ++l)
          words[l] = R::get(lo[c0 + l]) | std::uint32_t(R::get(hi[c0 + l])) << 16;
      } else {
        for (std::int64_t l = 0; l < n; ++l) words[l] = R::get(lo[c0 + l]);
      }
      const std::int64_t padded = (n + W - 1) / W * W;
      std::fill(words + n, words + padded, 0u);
      for (std::int64_t l = 0; l < padded; l += W)
        std::memcpy(dst + (c0 + l) / W * kp * W + p * W, words + l, W * sizeof(std::uint32_t));
    }
  }
}

void pack(const Operand& x, bool k_contiguous, std::int64_t lines, std::int64_t k,
          std::int64_t width, std::uint32_t* dst) {
  with_reader(x.dtype, [&]<class R>() {
    const auto* base = static_cast<const typename R::Elem*>(x.data);
    if (k_contiguous && width == kMR) pack_k_contiguous<R, kMR>(base, x.ld, lines, k, dst);
    if (k_contiguous && width == kNR) pack_k_contiguous<R, kNR>(base, x.ld, lines, k, dst);
    if (!k_contiguous && width == kMR) pack_rows<R, kMR>(base, x.ld, lines, k, dst);
    if (!k_contiguous && width == kNR) pack_rows<R, kNR>(base, x.ld, lines, k, dst);
  });
}

// One kMR x kNR tile of C over kp k-pairs. a: packed panel (word [p * kMR + i]) or in-place rows
// (word [i * rs + p]); b: packed panel. rows/cols: the part of the tile inside C.
template <bool kPackedA>
void tile(std::int64_t kp, const std::uint32_t* a, std::int64_t rs, const std::uint32_t* b,
          float* c, std::int64_t ldc, int rows, int cols, float alpha, float beta) {
  // In-place rows past the tile's last one may lie past the end of A: those lanes re-read row
  // 0 instead (their products land in C rows that are never stored).
  std::int64_t row_offset[kMR];
  for (int i = 0; i < kMR; ++i) row_offset[i] = (i < rows ? i : 0) * rs;
  auto word = [&](std::int64_t i, std::int64_t p) {
    return kPackedA ? a[p * kMR + i] : a[row_offset[i] + p];
  };
#if defined(__AVX512BF16__)
  // C's tile is read (beta) or written at the end: start bringing its lines in now.
  for (int i = 0; i < rows; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  __m512 acc[kMR][2];
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kNR + 16);
    for (int i = 0; i < kMR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(word(i, p)));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
  const __mmask16 m0 = cols >= 16 ? 0xffff : (1u << cols) - 1;
  const __mmask16 m1 = cols >= 32 ? 0xffff : cols > 16 ? (1u << (cols - 16)) - 1 : 0;
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int i = 0; i < kMR; ++i) {
    if (i >= rows) break;
    float* ci = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
    if (beta != 0) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
#else
  // Portable: each k-pair of B decoded once to f32, then rows of FMAs the compiler vectorizes.
  float acc[kMR][kNR] = {}, b_lo[kNR], b_hi[kNR];
  for (std::int64_t p = 0; p < kp; ++p) {
    for (int j = 0; j < kNR; ++j) {
      b_lo[j] = bf16_to_f32(b[p * kNR + j] & 0xffffu);
      b_hi[j] = bf16_to_f32(b[p * kNR + j] >> 16);
    }
    for (int i = 0; i < kMR; ++i) {
      const std::uint32_t w = word(i, p);
      const float lo = bf16_to_f32(w & 0xffffu), hi = bf16_to_f32(w >> 16);
#pragma omp simd
      for (int j = 0; j < kNR; ++j) acc[i][j] += lo * b_lo[j] + hi * b_hi[j];
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      float& ci = c[i * ldc + j];
      ci = beta != 0 ? alpha * acc[i][j] + beta * ci : alpha * acc[i][j];
    }
#endif
}

}  // namespace

Operand Operand::at(std::int64_t r, std::int64_t c) const {
  const std::int64_t offset = trans ? c * ld + r : r * ld + c;
  return Operand{static_cast<const char*>(data) + offset * static_cast<std::int64_t>(size_of(dtype)),
                 dtype, ld, trans};
}

void pack_b(const Operand& b, std::int64_t k, std::int64_t n, std::uint32_t* dst) {
  pack(b, b.trans, n, k, kNR, dst);
}
void pack_a(const Operand& a, std::int64_t m, std::int64_t k, std::uint32_t* dst) {
  pack(a, !a.trans, m, k, kMR, dst);
}

void multiply(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Left& a,
              const std::uint32_t* b, std::int64_t b_pairs, float beta, float* c,
              std::int64_t ldc) {
  const std::int64_t kp = pairs(k);
  KINTSUGI_ASSERT(kp <= b_pairs && (a.panel_pairs == 0 || kp <= a.panel_pairs));
  // Columns outside, rows inside: the B micro-panel stays in L1 across the row tiles.
  for (std::int64_t j0 = 0; j0 < n; j0 += kNR) {
    const std::uint32_t* bp = b + j0 / kNR * b_pairs * kNR;
    const int cols = static_cast<int>(std::min(kNR, n - j0));
    for (std::int64_t i0 = 0; i0 < m; i0 += kMR) {
      const int rows = static_cast<int>(std::min(kMR, m - i0));
      float* ct = c + i0 * ldc + j0;
      if (a.panel_pairs > 0)
        tile<true>(kp, a.words + i0 / kMR * a.panel_pairs * kMR, 0, bp, ct, ldc, rows, cols,
                   alpha, beta);
      else
        tile<false>(kp, a.words + i0 * a.row_stride, a.row_stride, bp, ct, ldc, rows, cols,
                    alpha, beta);
    }
  }
}

std::size_t scratch_bytes(int threads) {
  return threads * kAreaA + packed_b_words(kKC, kNC) * sizeof(std::uint32_t);
}

void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Operand& a,
          const Operand& b, float beta, float* c, std::int64_t ldc, std::byte* scratch,
          int threads) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta * C, without reading C when beta is 0
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta != 0 ? beta * c[i * ldc + j] : 0.0f;
    return;
  }
  if (omp_in_parallel()) threads = 1;
  // A's rows serve in place when they are bf16 words: row-major, even stride, 4-byte aligned,
  // and whole pairs (even k) so no element past a row's end is read.
  const bool a_in_place = a.dtype == DType::bf16 && !a.trans && a.ld % 2 == 0 && k % 2 == 0 &&
                          reinterpret_cast<std::uintptr_t>(a.data) % 4 == 0;
  auto* b_pack = reinterpret_cast<std::uint32_t*>(scratch + threads * kAreaA);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    auto* a_area = reinterpret_cast<std::uint32_t*>(scratch + omp_get_thread_num() * kAreaA);
    for (std::int64_t jc = 0; jc < n; jc += kNC) {
      const std::int64_t nc = std::min(kNC, n - jc);
      for (std::int64_t pc = 0; pc < k; pc += kKC) {
        const std::int64_t kc = std::min(kKC, k - pc), kp = pairs(kc);
#pragma omp for schedule(static)
        for (std::int64_t j = 0; j < nc; j += kNR)
          pack_b(b.at(pc, jc + j), kc, std::min(kNR, nc - j), b_pack + j / kNR * kp * kNR);
        const float beta_block = pc == 0 ? beta : 1.0f;
        // Each thread takes an equal share of the row tiles (whole kMC blocks would leave one
        // thread the short last block), walked in blocks of at most kMC rows.
        const std::int64_t tiles = (m + kMR - 1) / kMR, team = omp_get_num_threads();
        const std::int64_t t = omp_get_thread_num();
        const std::int64_t last = std::min(m, tiles * (t + 1) / team * kMR);
        for (std::int64_t ic = tiles * t / team * kMR; ic < last; ic += kMC) {
          const std::int64_t mc = std::min(kMC, last - ic);
          const Operand ab = a.at(ic, pc);
          Left left;
          if (a_in_place) {
            left = {static_cast<const std::uint32_t*>(ab.data), a.ld / 2, 0};
          } else if (!a.trans) {  // copy the rows as bf16 with an even stride (and a zero pad)
            auto* rows = reinterpret_cast<std::uint16_t*>(a_area);
            for (std::int64_t r = 0; r < mc; ++r) {
              std::uint16_t* out = rows + r * 2 * kp;
              with_reader(a.dtype, [&]<class R>() {
                const auto* in = static_cast<const typename R::Elem*>(ab.data) + r * a.ld;
                for (std::int64_t e = 0; e < kc; ++e) out[e] = R::get(in[e]);
              });
              if (kc % 2) out[kc] = 0;
            }
            left = {a_area, kp, 0};
          } else {
            pack_a(ab, mc, kc, a_area);
            left = {a_area, 0, kp};
          }
          multiply(mc, nc, kc, alpha, left, b_pack, kp, beta_block, c + ic * ldc + jc, ldc);
        }
#pragma omp barrier  // the next block of B is packed over this one
      }
    }
  }
}

}  // namespace kintsugi::cpu::bf16gemm
