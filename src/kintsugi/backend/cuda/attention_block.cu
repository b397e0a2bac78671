// Ring attention's block kernels (Backend::attention_block_forward / _backward, backend.hpp's
// AttentionBlock): a run of query rows against a run of key/value rows at their positions in
// the whole sequence. CUDA cores, one thread per row and its hd accumulators in registers: the
// forward walks its query's visible keys with an online softmax and merges the result into the
// running output and log-sum-exp; the backward's dQ thread walks its query's keys, its dK/dV
// thread its key's queries (every head of the kv head's group), each sum in a fixed order, no
// atomics. Correct and deterministic, not tuned: the tiles of attention.cu are the model for a
// faster one.
#include "kintsugi/backend/cuda/attention_common.cuh"
#include "kintsugi/backend/cuda/kernels.hpp"

namespace kintsugi::cuda {

namespace {

constexpr int kRowThreads = 64;

// Addressing of the block's tensors (backend.hpp): qkv, out, lse as attention's with `rows` rows
// per sequence (the queries), kv [B, rows, kv_heads, 2, hd] (the keys).
__host__ __device__ inline AttnShape with_rows(AttnShape s, std::int64_t rows) {
  s.seq = rows;
  return s;
}
struct BlockIndex {
  attn::QkvIndex rows;
  std::int64_t kv_ld, group, hd;
  __host__ __device__ BlockIndex(const AttnShape& s, const AttnBlock& blk)
      : rows(with_rows(s, blk.rows)), kv_ld(2 * s.kv_heads * s.head_dim), group(rows.group),
        hd(rows.hd) {}
  __device__ std::int64_t q(std::int64_t b, std::int64_t h, std::int64_t r) const {
    return rows.q(b, h, r);
  }
  __device__ std::int64_t k(std::int64_t b, std::int64_t kvh, std::int64_t r) const {
    return (b * rows.seq + r) * kv_ld + kvh * 2 * hd;
  }
  __device__ std::int64_t o(std::int64_t b, std::int64_t h, std::int64_t r) const {
    return rows.o(b, h, r);
  }
  __device__ std::int64_t lse(std::int64_t b, std::int64_t h, std::int64_t r) const {
    return rows.row(b, h, r);
  }
};

// A thread's unit (a (sequence, head) or (sequence, kv head)) and row: blocks run over units x
// the rows' blocks of kRowThreads; row -1 past the last.
struct RowThread {
  std::int64_t unit, row;
};
__device__ RowThread row_thread(std::int64_t rows) {
  const std::int64_t row_blocks = (rows + kRowThreads - 1) / kRowThreads;
  const std::int64_t row = blockIdx.x % row_blocks * kRowThreads + threadIdx.x;
  return {blockIdx.x / row_blocks, row < rows ? row : -1};
}

// A query thread's row: sequence b, head h (of kv head kvh), row r of the tensors, position qp.
struct QueryRow {
  std::int64_t b, h, kvh, r, qp;
};
__device__ QueryRow query_row(const AttnShape& s, const AttnBlock& blk, const RowThread& at) {
  const std::int64_t h = at.unit % s.heads;
  return {at.unit / s.heads, h, h / (s.heads / s.kv_heads), blk.q_begin + at.row,
          blk.q_position + at.row};
}

// The block's keys query position qp sees: key indexes [a, e) of its run (none when e <= a).
struct KeySpan {
  std::int64_t a, e;
};
__device__ KeySpan key_span(const AttnShape& s, const AttnBlock& blk, std::int64_t b,
                            std::int64_t qp) {
  const std::int64_t first = attn::first_key(s, b, qp) - blk.k_position;
  const std::int64_t last = qp - blk.k_position + 1;
  return {first > 0 ? first : 0, last < blk.k_count ? last : blk.k_count};
}

// The scaled score of query row q against key row k, with ALiBi's distance.
template <class Acc>
__device__ Acc score(const Ref& qkv, std::int64_t q, const Ref& kv, std::int64_t k,
                     std::int64_t hd, Acc scale, Acc slope, std::int64_t distance) {
  Acc dot = 0;
  for (std::int64_t d = 0; d < hd; ++d) dot += load<Acc>(qkv, q + d) * load<Acc>(kv, k + d);
  return scale * dot + slope * static_cast<Acc>(distance);
}

template <class Acc>
__global__ void __launch_bounds__(kRowThreads)
    block_forward_kernel(AttnShape s, AttnBlock blk, Ref qkv, Ref kv, Ref out, Ref lse,
                         bool merge, Acc scale) {
  const RowThread at = row_thread(blk.q_count);
  if (at.row < 0) return;
  const BlockIndex L(s, blk);
  const auto [b, h, kvh, r, qp] = query_row(s, blk, at);
  const std::int64_t hd = L.hd;
  const Acc slope = static_cast<Acc>(attn::head_slope(s, h));
  const KeySpan span = key_span(s, blk, b, qp);
  Acc acc[attn::kMaxHeadDim];
  for (std::int64_t d = 0; d < hd; ++d) acc[d] = 0;
  Acc mx = neg_infinity<Acc>(), sum = 0;
  for (std::int64_t j = span.a; j < span.e; ++j) {
    const std::int64_t k = L.k(b, kvh, blk.k_begin + j);
    const Acc x = score<Acc>(qkv, L.q(b, h, r), kv, k, hd, scale, slope, blk.k_position + j - qp);
    const Acc m = x > mx ? x : mx;
    const Acc keep = exp_acc(mx - m), p = exp_acc(x - m);
    sum = sum * keep + p;
    for (std::int64_t d = 0; d < hd; ++d) acc[d] = acc[d] * keep + p * load<Acc>(kv, k + hd + d);
    mx = m;
  }
  const std::int64_t o = L.o(b, h, r), l_at = L.lse(b, h, r);
  const Acc lb = span.e > span.a ? mx + log_acc(sum) : neg_infinity<Acc>();
  const Acc l = merge ? load<Acc>(lse, l_at) : neg_infinity<Acc>();
  if (lb == neg_infinity<Acc>()) {  // no key of the block: a merged row stays as it is
    if (merge) return;
    store(lse, l_at, lb);
    for (std::int64_t d = 0; d < hd; ++d) store(out, o + d, Acc(0));
    return;
  }
  const Acc inv = Acc(1) / sum;
  if (l == neg_infinity<Acc>()) {
    store(lse, l_at, lb);
    for (std::int64_t d = 0; d < hd; ++d) store(out, o + d, acc[d] * inv);
    return;
  }
  const Acc m = l > lb ? l : lb;
  const Acc merged = m + log_acc(exp_acc(l - m) + exp_acc(lb - m));
  const Acc keep = exp_acc(l - merged), add = exp_acc(lb - merged) * inv;
  for (std::int64_t d = 0; d < hd; ++d)
    store(out, o + d, keep * load<Acc>(out, o + d) + add * acc[d]);
  store(lse, l_at, merged);
}

// delta of query row r of head h: dO . O.
template <class Acc>
__device__ Acc row_delta(const Ref& out, const Ref& dout, std::int64_t o, std::int64_t hd) {
  Acc delta = 0;
  for (std::int64_t d = 0; d < hd; ++d) delta += load<Acc>(dout, o + d) * load<Acc>(out, o + d);
  return delta;
}

// dS of one (query, key) pair: P (dP - delta), P = exp(score - lse), dP = dO . V; and P.
template <class Acc>
struct PairGrad {
  Acc p, ds;
};
template <class Acc>
__device__ PairGrad<Acc> pair_grad(const Ref& qkv, std::int64_t q, const Ref& kv, std::int64_t k,
                                   const Ref& dout, std::int64_t o, std::int64_t hd, Acc scale,
                                   Acc slope, std::int64_t distance, Acc row_lse, Acc delta) {
  const Acc p = exp_acc(score<Acc>(qkv, q, kv, k, hd, scale, slope, distance) - row_lse);
  Acc dp = 0;
  for (std::int64_t d = 0; d < hd; ++d) dp += load<Acc>(dout, o + d) * load<Acc>(kv, k + hd + d);
  return {p, p * (dp - delta)};
}

template <class Acc>
__global__ void __launch_bounds__(kRowThreads)
    block_dq_kernel(AttnShape s, AttnBlock blk, Ref qkv, Ref kv, Ref out, Ref lse, Ref dout,
                    Ref dqkv, Acc scale) {
  const RowThread at = row_thread(blk.q_count);
  if (at.row < 0) return;
  const BlockIndex L(s, blk);
  const auto [b, h, kvh, r, qp] = query_row(s, blk, at);
  const std::int64_t hd = L.hd, o = L.o(b, h, r);
  const Acc slope = static_cast<Acc>(attn::head_slope(s, h));
  const Acc row_lse = load<Acc>(lse, L.lse(b, h, r)), delta = row_delta<Acc>(out, dout, o, hd);
  const KeySpan span = key_span(s, blk, b, qp);
  Acc acc[attn::kMaxHeadDim];
  for (std::int64_t d = 0; d < hd; ++d) acc[d] = 0;
  for (std::int64_t j = span.a; j < span.e; ++j) {
    const std::int64_t k = L.k(b, kvh, blk.k_begin + j);
    const PairGrad<Acc> g = pair_grad<Acc>(qkv, L.q(b, h, r), kv, k, dout, o, hd, scale, slope,
                                           blk.k_position + j - qp, row_lse, delta);
    for (std::int64_t d = 0; d < hd; ++d) acc[d] += g.ds * load<Acc>(kv, k + d);
  }
  const std::int64_t q = L.q(b, h, r);
  for (std::int64_t d = 0; d < hd; ++d) store(dqkv, q + d, load<Acc>(dqkv, q + d) + scale * acc[d]);
}

template <class Acc>
__global__ void __launch_bounds__(kRowThreads)
    block_dkv_kernel(AttnShape s, AttnBlock blk, Ref qkv, Ref kv, Ref out, Ref lse, Ref dout,
                     Ref dkv, Acc scale) {
  const BlockIndex L(s, blk);
  const RowThread at = row_thread(blk.k_count);
  if (at.row < 0) return;
  const std::int64_t j = at.row, b = at.unit / s.kv_heads, kvh = at.unit % s.kv_heads, hd = L.hd;
  const std::int64_t k = L.k(b, kvh, blk.k_begin + j), kp = blk.k_position + j;
  Acc dk[attn::kMaxHeadDim], dv[attn::kMaxHeadDim];
  for (std::int64_t d = 0; d < hd; ++d) dk[d] = dv[d] = 0;
  for (std::int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
    const Acc slope = static_cast<Acc>(attn::head_slope(s, h));
    for (std::int64_t i = 0; i < blk.q_count; ++i) {
      const std::int64_t qp = blk.q_position + i;
      const KeySpan span = key_span(s, blk, b, qp);
      if (j < span.a || j >= span.e) continue;
      const std::int64_t r = blk.q_begin + i, o = L.o(b, h, r), q = L.q(b, h, r);
      const PairGrad<Acc> g = pair_grad<Acc>(qkv, q, kv, k, dout, o, hd, scale, slope, kp - qp,
                                             load<Acc>(lse, L.lse(b, h, r)),
                                             row_delta<Acc>(out, dout, o, hd));
      for (std::int64_t d = 0; d < hd; ++d) {
        dk[d] += g.ds * load<Acc>(qkv, q + d);
        dv[d] += g.p * load<Acc>(dout, o + d);
      }
    }
  }
  for (std::int64_t d = 0; d < hd; ++d) {
    store(dkv, k + d, load<Acc>(dkv, k + d) + scale * dk[d]);
    store(dkv, k + hd + d, load<Acc>(dkv, k + hd + d) + dv[d]);
  }
}

template <class Acc>
Acc softmax_scale(const AttnShape& s) {
  return Acc(1) / std::sqrt(static_cast<Acc>(s.head_dim));  // as the CPU's
}

unsigned row_grid(std::int64_t units, std::int64_t rows) {
  return static_cast<unsigned>(units * ((rows + kRowThreads - 1) / kRowThreads));
}

}  // namespace

void attention_block_forward(const AttnShape& s, const AttnBlock& blk, Ref qkv, Ref kv, Ref out,
                             Ref lse, bool merge, cudaStream_t stream) {
  if (s.batch * s.heads <= 0 || blk.q_count <= 0) return;
  with_acc({qkv, kv, out, lse}, [&](auto acc) {
    using Acc = decltype(acc);
    KINTSUGI_CUDA_LAUNCH(block_forward_kernel<Acc>, row_grid(s.batch * s.heads, blk.q_count),
                         kRowThreads, 0, stream, s, blk, qkv, kv, out, lse, merge,
                         softmax_scale<Acc>(s));
    check_launch("block_forward_kernel", stream);
  });
}

void attention_block_backward(const AttnShape& s, const AttnBlock& blk, Ref qkv, Ref kv, Ref out,
                              Ref lse, Ref dout, Ref dqkv, Ref dkv, cudaStream_t stream) {
  if (s.batch * s.heads <= 0 || blk.q_count <= 0 || blk.k_count <= 0) return;
  with_acc({qkv, kv, out, lse, dout, dqkv, dkv}, [&](auto acc) {
    using Acc = decltype(acc);
    const Acc scale = softmax_scale<Acc>(s);
    KINTSUGI_CUDA_LAUNCH(block_dq_kernel<Acc>, row_grid(s.batch * s.heads, blk.q_count),
                         kRowThreads, 0, stream, s, blk, qkv, kv, out, lse, dout, dqkv, scale);
    check_launch("block_dq_kernel", stream);
    KINTSUGI_CUDA_LAUNCH(block_dkv_kernel<Acc>, row_grid(s.batch * s.kv_heads, blk.k_count),
                         kRowThreads, 0, stream, s, blk, qkv, kv, out, lse, dout, dkv, scale);
    check_launch("block_dkv_kernel", stream);
  });
}

}  // namespace kintsugi::cuda
