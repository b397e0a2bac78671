// Attention's entry points (backend.hpp): RoPE, causal self-attention and its decode step check
// their shapes against AttentionShape and count their FLOPs and bytes once, then run the device
// backend's implementation.
#include "kintsugi/backend/op_entry.hpp"
#include "kintsugi/core/attended_pairs.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
// Elements of a packed qkv tensor of shape s (backend.hpp, AttentionShape).
std::int64_t qkv_numel(const AttentionShape& s) {
  return s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim;
}
// Forward and backward: qkv packed as s says, out [B,T,H,hd], lse [B,H,T].
void check_attention(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse) {
  KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  KINTSUGI_ASSERT(qkv.numel() == qkv_numel(s));
  KINTSUGI_ASSERT(out.numel() == s.batch * s.seq * s.heads * s.head_dim);
  KINTSUGI_ASSERT(lse.numel() == s.batch * s.heads * s.seq);
}
// Document starts (AttentionShape::doc_start), read once per row when given.
double doc_starts(const AttentionShape& s) {
  return s.doc_start ? 4.0 * static_cast<double>(s.batch * s.seq) : 0;
}
}  // namespace

void Backend::rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table,
                   bool inverse) {
  KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0 && s.head_dim % 2 == 0);
  KINTSUGI_ASSERT(static_cast<std::int64_t>(table.inv_freq.size()) == s.head_dim / 2);
  KINTSUGI_ASSERT(qkv.numel() == qkv_numel(s));
  // The queries and keys are read and written, the values untouched: per kv head, its group of
  // heads / kv_heads queries and one key out of heads / kv_heads + 2 vectors.
  const double rotated =
      bytes(qkv) * double(s.heads + s.kv_heads) / double(s.heads + 2 * s.kv_heads);
  dispatch(attention_call(inverse ? "rope_backward" : "rope_forward", 0,
                          2 * rotated + doc_starts(s), s, qkv),
           [&] { device_.do_rope(s, qkv, table, inverse); });
}

namespace {
// qk_norm's tensors: qkv packed as s says, the weights [head_dim], rstd one per query and key head.
void check_qk_norm(const AttentionShape& s, const Tensor& qkv, const Tensor& q_weight,
                   const Tensor& k_weight, const Tensor& rstd) {
  KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0 && s.head_dim > 0);
  KINTSUGI_ASSERT(qkv.numel() == qkv_numel(s));
  KINTSUGI_ASSERT(q_weight.numel() == s.head_dim && k_weight.numel() == s.head_dim);
  KINTSUGI_ASSERT(rstd.numel() == s.batch * s.seq * (s.heads + s.kv_heads));
}
// The bytes of qkv's query and key heads (the values are not touched).
double qk_bytes(const AttentionShape& s, const Tensor& qkv) {
  return bytes(qkv) * double(s.heads + s.kv_heads) / double(s.heads + 2 * s.kv_heads);
}
}  // namespace

void Backend::qk_norm_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& q_weight,
                              const Tensor& k_weight, const Tensor& rstd, double eps) {
  check_qk_norm(s, qkv, q_weight, k_weight, rstd);
  const double f = 4.0 * s.batch * s.seq * double(s.heads + s.kv_heads) * s.head_dim;
  dispatch(attention_call("qk_norm_forward", f,
                          2 * qk_bytes(s, qkv) + bytes(q_weight) + bytes(k_weight) + bytes(rstd),
                          s, qkv),
           [&] { device_.do_qk_norm_forward(s, qkv, q_weight, k_weight, rstd, eps); });
}

void Backend::qk_norm_backward(const AttentionShape& s, const Tensor& pre, const Tensor& q_weight,
                               const Tensor& k_weight, const Tensor& rstd, const Tensor& d_qkv,
                               const Tensor& dq_weight, const Tensor& dk_weight) {
  check_qk_norm(s, pre, q_weight, k_weight, rstd);
  KINTSUGI_ASSERT(d_qkv.numel() == pre.numel());
  KINTSUGI_ASSERT(dq_weight.numel() == s.head_dim && dk_weight.numel() == s.head_dim);
  const double f = 10.0 * s.batch * s.seq * double(s.heads + s.kv_heads) * s.head_dim;
  const double moved = qk_bytes(s, pre) + 2 * qk_bytes(s, d_qkv) + bytes(rstd) +
                       bytes(q_weight) + bytes(k_weight) + 2 * (bytes(dq_weight) + bytes(dk_weight));
  dispatch(attention_call("qk_norm_backward", f, moved, s, pre), [&] {
    device_.do_qk_norm_backward(s, pre, q_weight, k_weight, rstd, d_qkv, dq_weight, dk_weight);
  });
}

void Backend::attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                const Tensor& lse) {
  check_attention(s, qkv, out, lse);
  // Model FLOPs of QK^T and PV, in full (see plan/flops.hpp): s x s, or with a sliding window
  // s x attended_keys, the planner's count (core/attended_pairs.hpp).
  const double f = 4.0 * s.batch * s.heads * double(s.seq) * attended_keys(s.seq, s.window) *
                   s.head_dim;
  const double moved = bytes(qkv) + bytes(out) + bytes(lse) + doc_starts(s);
  dispatch(attention_call("attention_forward", f, moved, s, qkv),
           [&] { device_.do_attention_forward(s, qkv, out, lse); });
}

void Backend::attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, const Tensor& dout, const Tensor& dqkv) {
  check_attention(s, qkv, out, lse);
  KINTSUGI_ASSERT(dqkv.numel() == qkv.numel() && dout.numel() == out.numel());
  const double f = 8.0 * s.batch * s.heads * double(s.seq) * attended_keys(s.seq, s.window) *
                   s.head_dim;
  const double moved =
      bytes(qkv) + bytes(out) + bytes(lse) + bytes(dout) + bytes(dqkv) + doc_starts(s);
  dispatch(attention_call("attention_backward", f, moved, s, qkv),
           [&] { device_.do_attention_backward(s, qkv, out, lse, dout, dqkv); });
}

namespace {
// A block's shapes (backend.hpp, AttentionBlock): its runs inside the rows and the sequence.
void check_block(const AttentionShape& s, const AttentionBlock& blk, const Tensor& qkv,
                 const Tensor& kv, const Tensor& out, const Tensor& lse) {
  KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0 && blk.rows > 0);
  KINTSUGI_ASSERT(blk.q_count > 0 && blk.q_begin >= 0 && blk.q_begin + blk.q_count <= blk.rows);
  KINTSUGI_ASSERT(blk.k_count > 0 && blk.k_begin >= 0 && blk.k_begin + blk.k_count <= blk.rows);
  KINTSUGI_ASSERT(blk.q_position >= 0 && blk.q_position + blk.q_count <= s.seq);
  KINTSUGI_ASSERT(blk.k_position >= 0 && blk.k_position + blk.k_count <= s.seq);
  AttentionShape local = s;
  local.seq = blk.rows;
  KINTSUGI_ASSERT(qkv.numel() == qkv_numel(local));
  KINTSUGI_ASSERT(kv.numel() == s.batch * blk.rows * 2 * s.kv_heads * s.head_dim);
  KINTSUGI_ASSERT(out.numel() == s.batch * blk.rows * s.heads * s.head_dim);
  KINTSUGI_ASSERT(lse.numel() == s.batch * s.heads * blk.rows);
}
// The (query, key) pairs of a block that causality and the window let it compute (documents
// aside, as attention_forward's count).
double block_pairs(const AttentionShape& s, const AttentionBlock& blk) {
  double pairs = 0;
  for (std::int64_t i = 0; i < blk.q_count; ++i) {
    const std::int64_t qp = blk.q_position + i;
    std::int64_t lo = blk.k_position, hi = std::min(qp + 1, blk.k_position + blk.k_count);
    if (s.window > 0) lo = std::max(lo, qp - s.window + 1);
    pairs += static_cast<double>(std::max<std::int64_t>(0, hi - lo));
  }
  return pairs;
}
}  // namespace

void Backend::attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                                      const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                      const Tensor& lse, bool merge) {
  check_block(s, blk, qkv, kv, out, lse);
  // QK^T and PV of the pairs computed, twice (the count's convention of s x s for s (s + 1) / 2
  // causal pairs, as attention_forward).
  const double f = 8.0 * s.batch * s.heads * block_pairs(s, blk) * s.head_dim;
  const double moved = bytes(qkv) + bytes(kv) + 2 * (bytes(out) + bytes(lse)) + doc_starts(s);
  dispatch(attention_call("attention_block_forward", f, moved, s, qkv),
           [&] { device_.do_attention_block_forward(s, blk, qkv, kv, out, lse, merge); });
}

void Backend::attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                       const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                       const Tensor& lse, const Tensor& dout, const Tensor& dqkv,
                                       const Tensor& dkv) {
  check_block(s, blk, qkv, kv, out, lse);
  KINTSUGI_ASSERT(dqkv.numel() == qkv.numel() && dkv.numel() == kv.numel() &&
                  dout.numel() == out.numel());
  const double f = 16.0 * s.batch * s.heads * block_pairs(s, blk) * s.head_dim;
  const double moved = bytes(qkv) + bytes(kv) + bytes(out) + bytes(lse) + bytes(dout) +
                       2 * (bytes(dqkv) + bytes(dkv)) + doc_starts(s);
  dispatch(attention_call("attention_block_backward", f, moved, s, qkv), [&] {
    device_.do_attention_block_backward(s, blk, qkv, kv, out, lse, dout, dqkv, dkv);
  });
}

void Backend::attention_decode(const AttentionShape& s, const Tensor& cache,
                               std::int64_t position, const Tensor& out) {
  KINTSUGI_ASSERT(position >= 0 && position < s.seq);
  KINTSUGI_ASSERT(cache.numel() == qkv_numel(s));
  KINTSUGI_ASSERT(out.numel() == s.batch * s.heads * s.head_dim);
  // The keys row `position` attends: rows 0..position, or the last `window` of them.
  const std::int64_t keys = s.window > 0 ? std::min(position + 1, s.window) : position + 1;
  const double f = 4.0 * s.batch * s.heads * double(keys) * s.head_dim;
  // Keys and values of those rows and the queries of row `position`, of each sequence.
  const std::int64_t read = s.batch * (keys * 2 * s.kv_heads + s.heads) * s.head_dim;
  dispatch(attention_call("attention_decode", f, bytes(cache, read) + bytes(out), s, cache),
           [&] { device_.do_attention_decode(s, cache, position, out); });
}

}  // namespace kintsugi
