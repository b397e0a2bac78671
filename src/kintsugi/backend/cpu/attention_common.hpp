#pragma once
// Pieces of causal self-attention shared by the typed kernels (attention.cpp) and the
// mixed-precision ones (attention_mixed.cpp): the packed-qkv addressing, the query block size,
// and the row bodies, so that both compute the same f32 arithmetic between their GEMMs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu::attn {

inline constexpr std::int64_t kBlock = 32;  // query rows per block

// Addressing into the packed qkv layout [B, T, kv_heads, group + 2, hd] (see AttentionShape).
struct QkvLayout {
  std::int64_t group, row_stride, hd, seq;
  explicit QkvLayout(const AttentionShape& s)
      : group(s.heads / s.kv_heads),
        row_stride(s.kv_heads * (s.heads / s.kv_heads + 2) * s.head_dim),
        hd(s.head_dim),
        seq(s.seq) {}
  std::int64_t q(std::int64_t b, std::int64_t h) const {
    return b * seq * row_stride + ((h / group) * (group + 2) + h % group) * hd;
  }
  std::int64_t k(std::int64_t b, std::int64_t kvh) const {
    return b * seq * row_stride + (kvh * (group + 2) + group) * hd;
  }
  std::int64_t v(std::int64_t b, std::int64_t kvh) const { return k(b, kvh) + hd; }
};

// ALiBi slope of local head h (0 without ALiBi).
inline double head_slope(const AttentionShape& s, std::int64_t h) {
  return s.alibi_heads > 0 ? alibi_slope(s.head_begin + h, s.alibi_heads) : 0.0;
}

// The first key query t of sequence b may see: its document's first row with document
// attention, else 0; with a sliding window (AttentionShape::window) no earlier than t - W + 1.
inline std::int64_t first_key(const AttentionShape& s, std::int64_t b, std::int64_t t) {
  const std::int64_t doc = s.doc_start ? s.doc_start[b * s.seq + t] : 0;
  return s.window > 0 ? std::max(doc, t - s.window + 1) : doc;
}

// The first key a block of queries from r0 may see, whatever the documents: 0 without a window,
// else r0 - W + 1 (at least 0). The block's scores start there, so with a window a block is
// multiplied only against the at most W + kBlock - 1 keys its window holds, not all before it.
inline std::int64_t block_first_key(const AttentionShape& s, std::int64_t r0) {
  return s.window > 0 ? std::max<std::int64_t>(0, r0 - s.window + 1) : 0;
}

// ALiBi: adds slope * (j - query) to the scores of the keys first <= j <= query. Relative to
// the query rather than BLOOM's slope * j: the same probabilities (a constant per row cancels
// in the softmax), with smaller numbers in the scores.
template <class T>
inline void add_alibi_row(T* row, std::int64_t first, std::int64_t query, T slope) {
  if (slope == T(0)) return;
#pragma omp simd
  for (std::int64_t j = first; j <= query; ++j) row[j] += slope * static_cast<T>(j - query);
}

// Row i of a block starting at query r0 sees keys [first, r0 + i] (first > 0 only with
// document attention). Turns scores into probabilities in place (masked entries become 0) and
// returns the row's log-sum-exp.
template <class T>
inline T softmax_causal_row(T* row, std::int64_t first, std::int64_t visible, std::int64_t cols) {
  T mx = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = first; j < visible; ++j) mx = std::max(mx, row[j]);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = first; j < visible; ++j) {
    row[j] = exp_fast(row[j] - mx);
    sum += row[j];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (std::int64_t j = first; j < visible; ++j) row[j] *= inv;
  for (std::int64_t j = 0; j < first; ++j) row[j] = 0;
  for (std::int64_t j = visible; j < cols; ++j) row[j] = 0;
  return mx + std::log(sum);
}

// delta_t = sum_d dO[t,d] O[t,d]  (= sum_j P[t,j] dP[t,j])
template <class T>
inline T dot_row(const T* a, const T* b, std::int64_t n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// Backward, one query row: scores p become probabilities exp(s - lse) and dp (dO . V^T)
// becomes dS = P * (dP - delta); masked entries 0.
template <class T>
inline void probs_and_dscores_row(T* p, T* dp, std::int64_t first, std::int64_t visible,
                                  std::int64_t cols, T lse, T delta) {
#pragma omp simd
  for (std::int64_t j = first; j < visible; ++j) {
    p[j] = exp_fast(p[j] - lse);
    dp[j] = p[j] * (dp[j] - delta);  // dS
  }
  for (std::int64_t j = 0; j < first; ++j) p[j] = dp[j] = 0;
  for (std::int64_t j = visible; j < cols; ++j) p[j] = dp[j] = 0;
}

}  // namespace kintsugi::cpu::attn
