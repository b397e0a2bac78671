#pragma once
// Attention by its direct formula in float64, the reference of the kernel tests: for query i,
// softmax over first(i) <= j <= i of q.k / sqrt(hd) + slope (j - i), where first(i) is the
// row's document start (AttentionShape::doc_start, 0 without documents), or with a sliding
// window (AttentionShape::window = W > 0) i - W + 1 when that is later, and slope the head's
// ALiBi slope (0 without ALiBi). qkv packed as AttentionShape says; out [B, T, H, hd]. And the
// kernel tests' check of a backend against it and against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"

namespace kintsugi::testing {

// Document starts (AttentionShape::doc_start) of sequences of `seq` rows, one per list of the
// rows that end a document (the end id belongs to the document it ends).
inline std::vector<std::int32_t> document_starts(std::int64_t seq,
                                                 const std::vector<std::vector<int>>& ends) {
  std::vector<std::int32_t> out;
  for (const auto& e : ends) {
    std::int32_t start = 0;
    for (std::int64_t t = 0; t < seq; ++t) {
      out.push_back(start);
      for (int end : e)
        if (end == t) start = static_cast<std::int32_t>(t + 1);
    }
  }
  return out;
}

inline std::vector<double> reference_attention(const AttentionShape& s, const std::vector<double>& qkv) {
  const std::int64_t group = s.heads / s.kv_heads, hd = s.head_dim;
  const std::int64_t width = s.kv_heads * (group + 2) * hd;
  std::vector<double> out(s.batch * s.seq * s.heads * hd, 0.0);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t kv = h / group;
      const std::int64_t q_off = (kv * (group + 2) + h % group) * hd;
      const std::int64_t k_off = (kv * (group + 2) + group) * hd, v_off = k_off + hd;
      const double slope = s.alibi_heads ? alibi_slope(s.head_begin + h, s.alibi_heads) : 0.0;
      for (std::int64_t i = 0; i < s.seq; ++i) {
        std::int64_t first = s.doc_start ? s.doc_start[b * s.seq + i] : 0;
        if (s.window > 0) first = std::max(first, i - s.window + 1);
        std::vector<double> p(i + 1, 0.0);
        double mx = -1e300, sum = 0;
        for (std::int64_t j = first; j <= i; ++j) {
          double sc = 0;
          for (std::int64_t d = 0; d < hd; ++d)
            sc += qkv[(b * s.seq + i) * width + q_off + d] * qkv[(b * s.seq + j) * width + k_off + d];
          p[j] = sc / std::sqrt(double(hd)) + slope * double(j - i);
          mx = std::max(mx, p[j]);
        }
        for (std::int64_t j = first; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (std::int64_t j = first; j <= i; ++j)
          for (std::int64_t d = 0; d < hd; ++d)
            out[((b * s.seq + i) * s.heads + h) * hd + d] +=
                p[j] / sum * qkv[(b * s.seq + j) * width + v_off + d];
      }
    }
  return out;
}

// The CPU backend's attention on shape s with random qkv (seed) in f64: the forward's output
// equals reference_attention to 1e-12 and differs from the reference of `without` (s without
// the feature under test: documents, ALiBi, a window) by more than `matters`, so the feature
// counts; the backward's dqkv matches finite differences of sum(out * r) at `samples` elements.
inline void expect_attention_matches_formula(const AttentionShape& s, const AttentionShape& without,
                                             std::uint32_t seed, double matters, int samples) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  const std::int64_t qkv_n = s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim;
  const std::int64_t out_n = s.batch * s.seq * s.heads * s.head_dim, lse_n = s.batch * s.heads * s.seq;
  auto qkv = random_vector(qkv_n, seed), r = random_vector(out_n, seed + 1);
  std::vector<double> out(out_n), lse(lse_n), dqkv(qkv_n);
  auto loss = [&] {
    be->attention_forward(s, view(qkv, {qkv_n}), view(out, {out_n}), view(lse, {lse_n}));
    return dot(out.data(), r.data(), out_n);
  };
  loss();
  const auto want = reference_attention(s, qkv), plain = reference_attention(without, qkv);
  double diff = 0;
  for (std::int64_t i = 0; i < out_n; ++i) {
    ASSERT_NEAR(out[i], want[i], 1e-12) << i;
    diff = std::max(diff, std::abs(plain[i] - want[i]));
  }
  EXPECT_GT(diff, matters);
  be->attention_backward(s, view(qkv, {qkv_n}), view(out, {out_n}), view(lse, {lse_n}),
                         view(r, {out_n}), view(dqkv, {qkv_n}));
  expect_gradient(loss, qkv.data(), qkv_n, dqkv.data(), "dqkv", samples);
}

}  // namespace kintsugi::testing
