#pragma once
// The (query, key) pairs causal attention computes with a sliding window, and the keys per query
// a FLOP count takes for them: one formula for the backend's per-call attention FLOPs
// (backend/ops_attention.cpp) and the planner's (plan/flops.hpp), so that a step's counted FLOPs
// are the planner's with a window too (docs/metrics.md, "FLOPs").
#include <cstdint>

namespace kintsugi {

// The (query, key) pairs causal attention over seq rows computes with a sliding window of W
// (AttentionShape::window): sum over t of min(t + 1, W), seq W - W (W - 1) / 2 for seq >= W;
// without a window (W <= 0 or W >= seq) seq (seq + 1) / 2.
inline double attended_pairs(std::int64_t seq, std::int64_t window) {
  const double s = static_cast<double>(seq);
  if (window <= 0 || window >= seq) return s * (s + 1) / 2;
  const double w = static_cast<double>(window);
  return s * w - w * (w - 1) / 2;
}

// The keys per query that the FLOP counts take: seq without a window (the convention's full
// s x s), and with one seq x attended_pairs(seq, W) / attended_pairs(seq, 0), so that the count
// keeps the convention's ratio to the pairs computed (about 2) and a window of seq or more
// counts as none. O(W) for W << seq: 2 seq W / (seq + 1) at most.
inline double attended_keys(std::int64_t seq, std::int64_t window) {
  if (window <= 0 || window >= seq) return static_cast<double>(seq);
  return static_cast<double>(seq) * attended_pairs(seq, window) / attended_pairs(seq, 0);
}

}  // namespace kintsugi
