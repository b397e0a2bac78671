// Causal self-attention forward on CUDA cores, flash-attention style (16-bit qkv with the usual
// head sizes go to the tensor-core kernels, attention_tc_forward.cu): a block takes kTile queries of one
// (sequence, head) and walks the key/value tiles they may see, keeping for each query a running
// maximum, a running sum of exponentials and an unnormalized output (the online softmax), so no
// T x T matrix is ever stored. Only each row's log-sum-exp is kept for backward. With document
// attention a query also ignores the keys before its document's first row, and with a sliding
// window those before it (the tiles wholly before are not visited).
//
// Layout: 4 warps per block, each owning 8 of the 32 queries. For a query and a key tile, lane j
// scores key j of the tile, the warp reduces the tile's maximum and sum with shuffles, and every
// lane accumulates its own dimensions (d = lane + 32 m) of the output, reading the 32
// probabilities from shared memory.
#include <cmath>

#include "kintsugi/backend/cuda/attention_common.cuh"
#include "kintsugi/backend/cuda/attention_cudnn.hpp"
#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda {

namespace {

using attn::kTile;
using attn::QkvIndex;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = kTile / kWarps;

template <class Acc, int DL>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(AttnShape s, Ref qkv, Ref out, Ref lse, Acc scale,
                             std::int64_t q_tiles) {
  Acc* q_tile = dynamic_shared<Acc>();
  const std::int64_t hd = s.head_dim, T = s.seq, ld = hd + 1;
  Acc* k_tile = q_tile + kTile * ld;
  Acc* v_tile = k_tile + kTile * ld;
  __shared__ Acc probs[kWarps][kTile];
  const QkvIndex L(s);
  const attn::QueryTileBlock blk(s, L, q_tiles);
  const std::int64_t b = blk.b, h = blk.h, kvh = blk.kvh, q0 = blk.q0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Acc slope = static_cast<Acc>(attn::head_slope(s, h));

  attn::load_tile(
      q_tile, qkv, [&](std::int64_t t) { return L.q(b, h, t); }, q0, T, hd);
  Acc m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DL];
#pragma unroll
  for (int ri = 0; ri < kRowsPerWarp; ++ri) {
    m[ri] = neg_infinity<Acc>();
    l[ri] = 0;
#pragma unroll
    for (int dd = 0; dd < DL; ++dd) o[ri][dd] = 0;
  }

  const std::int64_t last_query = smaller(T, q0 + kTile) - 1;
  // From the first key tile the sliding window leaves the queries (0 without one).
  for (std::int64_t k0 = attn::first_window_tile(s, q0, kTile); k0 <= last_query; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    attn::load_kv_tiles(k_tile, v_tile, qkv, L, b, kvh, k0);
    __syncthreads();
#pragma unroll
    for (int ri = 0; ri < kRowsPerWarp; ++ri) {
      const int row = warp * kRowsPerWarp + ri;
      const std::int64_t i = q0 + row;
      if (i >= T || k0 > i) continue;  // uniform across the warp
      // With documents, tiles wholly before the query's document are skipped: the tile holds
      // a key the query sees.
      const std::int64_t first = attn::first_key(s, b, i);
      if (k0 + kTile <= first) continue;
      const std::int64_t j = k0 + lane;
      Acc score = attn::dot_rows(q_tile + row * ld, k_tile + lane * ld, hd) * scale +
                  slope * static_cast<Acc>(j - i);
      // Causal and document mask (also every key past the end).
      if (j > i || j < first) score = neg_infinity<Acc>();
      // A key max(k0, first) <= i is in this tile, so the new maximum is finite.
      const Acc m_new = max(m[ri], warp_max(score));
      const Acc correction = exp_acc(m[ri] - m_new);
      const Acc p = exp_acc(score - m_new);
      l[ri] = l[ri] * correction + warp_sum(p);
      m[ri] = m_new;
      const int keys = static_cast<int>(smaller<std::int64_t>(kTile, i - k0 + 1));
#pragma unroll
      for (int dd = 0; dd < DL; ++dd) o[ri][dd] *= correction;
      attn::add_weighted_rows(o[ri], probs[warp], p, keys, v_tile, ld, hd, lane);
    }
  }

#pragma unroll
  for (int ri = 0; ri < kRowsPerWarp; ++ri) {
    const std::int64_t i = q0 + warp * kRowsPerWarp + ri;
    if (i >= T) continue;
    attn::store_lane_dims(out, L.o(b, h, i), o[ri], Acc(1) / l[ri], hd, lane);
    if (lane == 0) store(lse, L.row(b, h, i), m[ri] + log_acc(l[ri]));
  }
}

template <class Acc, int DL>
void launch_forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  const std::int64_t q_tiles = (s.seq + kTile - 1) / kTile;
  const std::size_t shared = sizeof(Acc) * 3 * kTile * static_cast<std::size_t>(s.head_dim + 1);
  auto* kernel = attention_forward_kernel<Acc, DL>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "cudaFuncSetAttribute (attention forward shared memory)");
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(s.head_dim));  // as the CPU's
  KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(s.batch * s.heads * q_tiles), kWarps * 32,
                       shared, stream, s, qkv, out, lse, scale, q_tiles);
  check_launch("attention_forward_kernel", stream);
}

template <class Acc>
void forward_t(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  switch (attn::dims_per_lane(s.head_dim)) {
    case 1:
      return launch_forward<Acc, 1>(s, qkv, out, lse, stream);
    case 2:
      return launch_forward<Acc, 2>(s, qkv, out, lse, stream);
    case 4:
      return launch_forward<Acc, 4>(s, qkv, out, lse, stream);
    default:
      return launch_forward<Acc, 8>(s, qkv, out, lse, stream);
  }
}

}  // namespace

void attention_forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  if (s.batch * s.heads * s.seq <= 0) return;
  if (attn_cudnn::takes_forward(s, qkv, lse)) return attn_cudnn::forward(s, qkv, out, lse, stream);
  if (attn_tc::takes(s, qkv)) return attn_tc::forward(s, qkv, out, lse, stream);
  with_acc({qkv, out, lse}, [&](auto acc) {
    forward_t<decltype(acc)>(s, qkv, out, lse, stream);
  });
}

}  // namespace kintsugi::cuda
