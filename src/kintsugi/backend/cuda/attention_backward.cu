// Causal self-attention backward on CUDA cores without atomics, in three kernels that recompute
// the probabilities from the saved log-sum-exp (P = exp(S - lse)) instead of storing them
// (16-bit qkv with the usual head sizes goes to the tensor-core kernels after the first one,
// attention_tc_backward.cu):
//   1. delta[t] = dO[t] . O[t] per row (= sum_j P dP), into scratch;
//   2. dK, dV: a block per (sequence, kv head, tile of 32 keys) walks every query head of the
//      kv head's group and every query tile that sees its keys, summing into registers in a
//      fixed order: dV_j = sum_i P_ij dO_i, dK_j = scale sum_i dS_ij Q_i, dS = P (dP - delta);
//   3. dQ: a block per (sequence, head, tile of 32 queries) walks the key tiles its queries see:
//      dQ_i = scale sum_j dS_ij K_j.
// Each gradient element is written by exactly one thread after a fixed sequence of additions,
// so backward is deterministic; grouped-query heads sum into dK and dV in head order.
#include <algorithm>
#include <cmath>

#include "kintsugi/backend/cuda/attention_common.cuh"
#include "kintsugi/backend/cuda/attention_cudnn.hpp"
#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda {

namespace {

using attn::kTile;
using attn::QkvIndex;

constexpr int kWarps = 8;                 // dK/dV and dQ kernels: 256 threads
constexpr int kPerWarp = kTile / kWarps;  // keys (dK/dV) or queries (dQ) per warp

template <class Acc>
__global__ void delta_kernel(AttnShape s, Ref out, Ref dout, Acc* delta) {
  const QkvIndex L(s);
  const std::int64_t rows = s.batch * s.heads * s.seq, hd = s.head_dim;
  const int lane = threadIdx.x % 32;
  const std::int64_t first =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t row = first; row < rows; row += step) {  // row = (b, h, t) as in lse
    const std::int64_t t = row % s.seq, h = (row / s.seq) % s.heads, b = row / (s.seq * s.heads);
    const std::int64_t at = L.o(b, h, t);
    Acc acc = 0;
    for (std::int64_t d = lane; d < hd; d += 32)
      acc += load<Acc>(dout, at + d) * load<Acc>(out, at + d);
    acc = warp_sum(acc);
    if (lane == 0) delta[row] = acc;
  }
}

// Per-query statistics of a tile: lse and delta of rows t0.. (0 past the end).
template <class Acc>
__device__ void load_row_stats(Acc* lse_tile, Acc* delta_tile, const Ref& lse, const Acc* delta,
                               const QkvIndex& L, std::int64_t b, std::int64_t h, std::int64_t t0) {
  for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
    const std::int64_t t = t0 + r;
    lse_tile[r] = t < L.seq ? load<Acc>(lse, L.row(b, h, t)) : Acc(0);
    delta_tile[r] = t < L.seq ? delta[L.row(b, h, t)] : Acc(0);
  }
}

// The dK/dV and dQ kernels' dynamic shared memory (backward_t sizes it): tiles of kTile rows of
// Q, dO, K and V, padded to ld = hd + 1, then the query rows' lse and delta.
template <class Acc>
struct BackwardTiles {
  Acc *q, *dout, *k, *v, *lse, *delta;
  __device__ explicit BackwardTiles(std::int64_t ld)
      : q(dynamic_shared<Acc>()),
        dout(q + kTile * ld),
        k(dout + kTile * ld),
        v(k + kTile * ld),
        lse(v + kTile * ld),
        delta(lse + kTile) {}
  // The query tile from q0 of head h of sequence b: Q, dO and the rows' statistics.
  __device__ void load_queries(const Ref& qkv, const Ref& dout_ref, const Ref& lse_ref,
                               const Acc* delta_ref, const QkvIndex& L, std::int64_t b,
                               std::int64_t h, std::int64_t q0) {
    attn::load_tile(
        q, qkv, [&](std::int64_t t) { return L.q(b, h, t); }, q0, L.seq, L.hd);
    attn::load_tile(
        dout, dout_ref, [&](std::int64_t t) { return L.o(b, h, t); }, q0, L.seq, L.hd);
    load_row_stats(lse, delta, lse_ref, delta_ref, L, b, h, q0);
  }
};

template <class Acc, int DL>
__global__ void __launch_bounds__(kWarps * 32)
    dkdv_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const Acc* delta, Ref dqkv, Acc scale,
                std::int64_t k_tiles) {
  const std::int64_t hd = s.head_dim, T = s.seq, ld = hd + 1;
  BackwardTiles<Acc> tiles(ld);
  const Acc *q_tile = tiles.q, *do_tile = tiles.dout, *k_tile = tiles.k, *v_tile = tiles.v;
  const Acc *lse_tile = tiles.lse, *delta_tile = tiles.delta;
  __shared__ Acc probs[kWarps][kTile], dscores[kWarps][kTile];
  const QkvIndex L(s);
  const std::int64_t bk = blockIdx.x / k_tiles, k0 = (blockIdx.x % k_tiles) * kTile;
  const std::int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  attn::load_kv_tiles(tiles.k, tiles.v, qkv, L, b, kvh, k0);
  Acc dk[kPerWarp][DL], dv[kPerWarp][DL];
#pragma unroll
  for (int kk = 0; kk < kPerWarp; ++kk)
#pragma unroll
    for (int dd = 0; dd < DL; ++dd) dk[kk][dd] = dv[kk][dd] = 0;

  for (std::int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
    const Acc slope = static_cast<Acc>(attn::head_slope(s, h));
    // Queries before k0 see none of the keys, nor (sliding window) those past the last key's
    // window.
    const std::int64_t q_end = attn::window_query_end(s, k0, kTile);
    for (std::int64_t q0 = k0; q0 < q_end; q0 += kTile) {
      __syncthreads();  // the previous query tile is consumed (and the key tiles are loaded)
      tiles.load_queries(qkv, dout, lse, delta, L, b, h, q0);
      __syncthreads();
      const std::int64_t i = q0 + lane;  // this lane's query
#pragma unroll
      for (int kk = 0; kk < kPerWarp; ++kk) {
        const int kr = warp * kPerWarp + kk;
        const std::int64_t j = k0 + kr;
        if (j >= T) continue;  // uniform across the warp
        Acc p = 0, ds = 0;
        if (i < T && i >= j && j >= attn::first_key(s, b, i)) {
          const Acc score = attn::dot_rows(q_tile + lane * ld, k_tile + kr * ld, hd) * scale +
                            slope * static_cast<Acc>(j - i);
          p = exp_acc(score - lse_tile[lane]);
          const Acc dp = attn::dot_rows(do_tile + lane * ld, v_tile + kr * ld, hd);
          ds = p * (dp - delta_tile[lane]);
        }
        // Each lane needs every query's p and dS: through shared memory.
        probs[warp][lane] = p;
        dscores[warp][lane] = ds;
        __syncwarp();
        for (int ii = 0; ii < kTile; ++ii) {
          const Acc pi = probs[warp][ii], dsi = dscores[warp][ii];
#pragma unroll
          for (int dd = 0; dd < DL; ++dd) {
            const std::int64_t d = lane + 32 * dd;
            if (d < hd) {
              dv[kk][dd] += pi * do_tile[ii * ld + d];
              dk[kk][dd] += dsi * q_tile[ii * ld + d];
            }
          }
        }
        __syncwarp();  // read before the next key overwrites them
      }
    }
  }

#pragma unroll
  for (int kk = 0; kk < kPerWarp; ++kk) {
    const std::int64_t j = k0 + warp * kPerWarp + kk;
    if (j >= T) continue;
    attn::store_lane_dims(dqkv, L.k(b, kvh, j), dk[kk], scale, hd, lane);
    attn::store_lane_dims(dqkv, L.v(b, kvh, j), dv[kk], Acc(1), hd, lane);
  }
}

template <class Acc, int DL>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const Acc* delta, Ref dqkv, Acc scale,
              std::int64_t q_tiles) {
  const std::int64_t hd = s.head_dim, T = s.seq, ld = hd + 1;
  BackwardTiles<Acc> tiles(ld);
  const Acc *q_tile = tiles.q, *do_tile = tiles.dout, *k_tile = tiles.k, *v_tile = tiles.v;
  const Acc *lse_tile = tiles.lse, *delta_tile = tiles.delta;
  __shared__ Acc dscores[kWarps][kTile];
  const QkvIndex L(s);
  const attn::QueryTileBlock blk(s, L, q_tiles);
  const std::int64_t b = blk.b, h = blk.h, kvh = blk.kvh, q0 = blk.q0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Acc slope = static_cast<Acc>(attn::head_slope(s, h));

  tiles.load_queries(qkv, dout, lse, delta, L, b, h, q0);
  Acc dq[kPerWarp][DL];
#pragma unroll
  for (int ri = 0; ri < kPerWarp; ++ri)
#pragma unroll
    for (int dd = 0; dd < DL; ++dd) dq[ri][dd] = 0;

  const std::int64_t last_query = smaller(T, q0 + kTile) - 1;
  // From the first key tile the sliding window leaves the queries (0 without one).
  for (std::int64_t k0 = attn::first_window_tile(s, q0, kTile); k0 <= last_query; k0 += kTile) {
    __syncthreads();
    attn::load_kv_tiles(tiles.k, tiles.v, qkv, L, b, kvh, k0);
    __syncthreads();
#pragma unroll
    for (int ri = 0; ri < kPerWarp; ++ri) {
      const int row = warp * kPerWarp + ri;
      const std::int64_t i = q0 + row;
      if (i >= T || k0 > i) continue;    // uniform across the warp
      const std::int64_t j = k0 + lane;  // this lane's key
      Acc ds = 0;
      if (j <= i && j >= attn::first_key(s, b, i)) {
        const Acc score = attn::dot_rows(q_tile + row * ld, k_tile + lane * ld, hd) * scale +
                          slope * static_cast<Acc>(j - i);
        const Acc p = exp_acc(score - lse_tile[row]);
        const Acc dp = attn::dot_rows(do_tile + row * ld, v_tile + lane * ld, hd);
        ds = p * (dp - delta_tile[row]);
      }
      const int keys = static_cast<int>(smaller<std::int64_t>(kTile, i - k0 + 1));
      attn::add_weighted_rows(dq[ri], dscores[warp], ds, keys, k_tile, ld, hd, lane);
    }
  }

#pragma unroll
  for (int ri = 0; ri < kPerWarp; ++ri) {
    const std::int64_t i = q0 + warp * kPerWarp + ri;
    if (i >= T) continue;
    attn::store_lane_dims(dqkv, L.q(b, h, i), dq[ri], scale, hd, lane);
  }
}

template <class Acc>
void launch_delta(const AttnShape& s, Ref out, Ref dout, Acc* delta, cudaStream_t stream) {
  const std::int64_t rows = s.batch * s.heads * s.seq;
  KINTSUGI_CUDA_LAUNCH(delta_kernel<Acc>, grid_for(rows * 32), kThreads, 0, stream, s, out, dout,
                       delta);
  check_launch("attention delta_kernel", stream);
}

template <class Acc, int DL>
void backward_t(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv, Acc* delta,
                cudaStream_t stream) {
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(s.head_dim));  // as the CPU's
  const std::int64_t tiles = (s.seq + kTile - 1) / kTile;
  launch_delta(s, out, dout, delta, stream);
  const std::size_t shared =
      sizeof(Acc) * (4 * kTile * static_cast<std::size_t>(s.head_dim + 1) + 2 * kTile);

  auto* dkdv = dkdv_kernel<Acc, DL>;
  check(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "cudaFuncSetAttribute (attention dK/dV shared memory)");
  KINTSUGI_CUDA_LAUNCH(dkdv, static_cast<unsigned>(s.batch * s.kv_heads * tiles), kWarps * 32,
                       shared, stream, s, qkv, lse, dout, delta, dqkv, scale, tiles);
  check_launch("attention dkdv_kernel", stream);

  auto* dq = dq_kernel<Acc, DL>;
  check(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "cudaFuncSetAttribute (attention dQ shared memory)");
  KINTSUGI_CUDA_LAUNCH(dq, static_cast<unsigned>(s.batch * s.heads * tiles), kWarps * 32, shared,
                       stream, s, qkv, lse, dout, delta, dqkv, scale, tiles);
  check_launch("attention dq_kernel", stream);
}

template <class Acc>
void backward_acc(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv, Acc* delta,
                  cudaStream_t stream) {
  switch (attn::dims_per_lane(s.head_dim)) {
    case 1:
      return backward_t<Acc, 1>(s, qkv, out, lse, dout, dqkv, delta, stream);
    case 2:
      return backward_t<Acc, 2>(s, qkv, out, lse, dout, dqkv, delta, stream);
    case 4:
      return backward_t<Acc, 4>(s, qkv, out, lse, dout, dqkv, delta, stream);
    default:
      return backward_t<Acc, 8>(s, qkv, out, lse, dout, dqkv, delta, stream);
  }
}

// Scratch: delta per (b, h, t) row (sized for f64), then, at the next 256-byte boundary, the
// tensor-core backward's dQ partials. Which kernels run depends on qkv's type, which this size
// does not see: with f32 statistics and a tensor-core head size the partials are counted even
// when qkv is f32 (bounded, attention_tc_backward.cu).
std::size_t delta_bytes(const AttnShape& s) {
  return (sizeof(double) * static_cast<std::size_t>(s.batch * s.heads * s.seq) + 255) / 256 * 256;
}

}  // namespace

std::size_t attention_backward_scratch_bytes(const AttnShape& s, DType lse_dtype) {
  if (lse_dtype == DType::f64) return delta_bytes(s);
  return delta_bytes(s) +
         std::max(attn_tc::backward_scratch_bytes(s), attn_cudnn::backward_scratch_bytes(s));
}

void attention_backward(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv,
                        Scratch scratch, cudaStream_t stream) {
  if (s.batch * s.heads * s.seq <= 0) return;
  if (attn_cudnn::takes_backward(s, qkv, lse))
    return attn_cudnn::backward(s, qkv, out, lse, dout, dqkv, scratch, stream);
  if (attn_tc::takes(s, qkv)) {
    auto* delta = static_cast<float*>(scratch.data);
    launch_delta(s, out, dout, delta, stream);
    const std::size_t skip = delta_bytes(s);
    const Scratch partials{static_cast<unsigned char*>(scratch.data) + skip,
                           scratch.bytes > skip ? scratch.bytes - skip : 0};
    return attn_tc::backward(s, qkv, lse, dout, delta, dqkv, partials, stream);
  }
  with_acc({qkv, out, lse, dout, dqkv}, [&](auto acc) {
    backward_acc<decltype(acc)>(s, qkv, out, lse, dout, dqkv,
                                static_cast<decltype(acc)*>(scratch.data), stream);
  });
}

}  // namespace kintsugi::cuda
