#pragma once
// Attention by its direct formula in float64, the reference of the kernel tests: for query i,
// softmax over first(i) <= j <= i of q.k / sqrt(hd) + slope (j - i), where first(i) is the
// row's document start (AttentionShape::doc_start, 0 without documents) and slope the head's
// ALiBi slope (0 without ALiBi). qkv packed as AttentionShape says; out [B, T, H, hd].
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi::testing {

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
        const std::int64_t first = s.doc_start ? s.doc_start[b * s.seq + i] : 0;
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

}  // namespace kintsugi::testing
