// Causal self-attention backward on the tensor cores, without atomics: the probabilities are
// recomputed from the saved log-sum-exp (P = exp(S - lse)) in two kernels, as in
// attention_backward.cu, each gradient element summed by one thread in a fixed order:
//   dK, dV: a block per (sequence, kv head, 64 keys), each warp 16 keys, walks every query head
//     of the group and every query tile that sees its keys, with the keys as the products' rows:
//     S^T = K Q^T, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q;
//   dQ: a block per (sequence, head, 64 queries) walks the key tiles its queries see:
//     S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// delta = dO . O per row comes from attention_backward.cu.
#include <cmath>

#include "kintsugi/backend/cuda/attention_tc.cuh"
#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda::attn_tc {

namespace {

struct Scales {
  float log2;     // 1/sqrt(hd) * log2(e): scores in base 2
  float natural;  // 1/sqrt(hd): the chain rule's factor on dQ and dK
};

template <class E, int HD>
__global__ void __launch_bounds__(kBlockThreads)
    dkdv_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
                Scales scale, std::int64_t k_tiles) {
  constexpr int kLd = row_stride(HD), kDimTiles = HD / 8;
  std::uint16_t* k_s = dynamic_shared<std::uint16_t>();
  std::uint16_t* v_s = k_s + kRows * kLd;
  std::uint16_t* qdo_s = v_s + kRows * kLd;  // two buffers of (Q, dO): the next is copied early
  float* lse_s = reinterpret_cast<float*>(qdo_s + 4 * kRows * kLd);  // base 2
  float* delta_s = lse_s + kRows;
  std::int64_t* first_s = reinterpret_cast<std::int64_t*>(delta_s + kRows);
  const attn::QkvIndex L(s);
  const std::int64_t T = s.seq;
  const std::int64_t bk = blockIdx.x / k_tiles, k0 = (blockIdx.x % k_tiles) * kRows;
  const std::int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const std::int64_t warp_key = k0 + warp * 16;
  const std::int64_t key[2] = {warp_key + g, warp_key + g + 8};

  load_tile<E, HD>(
      k_s, qkv, [&](std::int64_t t) { return L.k(b, kvh, t); }, k0, T);
  load_tile<E, HD>(
      v_s, qkv, [&](std::int64_t t) { return L.v(b, kvh, t); }, k0, T);
  float dk[kDimTiles][4], dv[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[dt][c] = dv[dt][c] = 0.f;

  // The (query head, query tile) pairs the block visits, in order: every head of the kv head's
  // group and, per head, the query tiles from k0 on (queries before k0 see none of the keys)
  // until one whose first query's document starts after these keys (document starts only grow,
  // so every later tile's does too).
  const auto next = [&](std::int64_t& h, std::int64_t& q0) {
    q0 += kRows;
    if (q0 < T && attn::first_key(s, b, q0) < k0 + kRows) return true;
    q0 = k0;
    return ++h < (kvh + 1) * L.group;
  };
  const auto fetch = [&](int buf, std::int64_t h, std::int64_t q0) {
    std::uint16_t* q_s = qdo_s + buf * 2 * kRows * kLd;
    load_tile<E, HD>(
        q_s, qkv, [&](std::int64_t t) { return L.q(b, h, t); }, q0, T);
    load_tile<E, HD>(
        q_s + kRows * kLd, dout, [&](std::int64_t t) { return L.o(b, h, t); }, q0, T);
  };
  std::int64_t h = kvh * L.group, q0 = k0;
  fetch(0, h, q0);
  async_commit();
  for (int buf = 0;; buf ^= 1) {
    std::int64_t next_h = h, next_q0 = q0;
    const bool more = next(next_h, next_q0);
    if (more) fetch(buf ^ 1, next_h, next_q0);
    async_commit();
    for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
      const std::int64_t i = q0 + r;
      lse_s[r] = i < T ? load<float>(lse, L.row(b, h, i)) * kLog2e : 0.f;
      delta_s[r] = i < T ? delta[L.row(b, h, i)] : 0.f;
      first_s[r] = i < T ? attn::first_key(s, b, i) : T;  // past the end: sees nothing
    }
    async_wait<1>();  // all but the copies just issued (K and V came with the first pair)
    __syncthreads();
    const float slope_log2 = static_cast<float>(attn::head_slope(s, h)) * kLog2e;
    const std::uint16_t* q_s = qdo_s + buf * 2 * kRows * kLd;
    const std::uint16_t* do_s = q_s + kRows * kLd;
    // Only warps whose keys some query of the tile sees (uniform across the warp).
    if (warp_key < T && attn::first_key(s, b, q0) <= warp_key + 15) {
      float st[8][4], dpt[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) st[nt][c] = dpt[nt][c] = 0.f;
      times_transposed<E, HD>(st, k_s, warp * 16, q_s);
      times_transposed<E, HD>(dpt, v_s, warp * 16, do_s);
      // P^T and dS^T in place of S^T and dP^T: rows are keys, columns queries.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int col = acc_col(nt, c);
          const std::int64_t j = key[c / 2], i = q0 + col;
          float p = 0.f;
          if (i >= j && j >= first_s[col] && i < T && j < T)
            p = exp2f(st[nt][c] * scale.log2 + slope_log2 * static_cast<float>(j - i) - lse_s[col]);
          st[nt][c] = p;
          dpt[nt][c] = p * (dpt[nt][c] - delta_s[col]);
        }
      times_tile<E, HD>(dv, st, do_s);
      times_tile<E, HD>(dk, dpt, q_s);
    }
    __syncthreads();  // the buffer and the statistics are refilled next
    if (!more) break;
    h = next_h;
    q0 = next_q0;
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= T) continue;
    const std::int64_t k_at = L.k(b, kvh, key[r]), v_at = L.v(b, kvh, key[r]);
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        store(dqkv, k_at + acc_col(dt, c), dk[dt][2 * r + c] * scale.natural);
        store(dqkv, v_at + acc_col(dt, c), dv[dt][2 * r + c]);
      }
  }
}

template <class E, int HD>
__global__ void __launch_bounds__(kBlockThreads)
    dq_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv, Scales scale,
              std::int64_t q_tiles) {
  constexpr int kLd = row_stride(HD), kDimTiles = HD / 8;
  std::uint16_t* q_s = dynamic_shared<std::uint16_t>();
  std::uint16_t* do_s = q_s + kRows * kLd;  // then the key/value buffers
  const QueryTile<E, HD> q(s, q_tiles, do_s + kRows * kLd);
  const int warp = threadIdx.x / 32;
  load_tile<E, HD>(
      q_s, qkv, [&](std::int64_t t) { return q.L.q(q.b, q.h, t); }, q.q0, q.T);
  load_tile<E, HD>(
      do_s, dout, [&](std::int64_t t) { return q.L.o(q.b, q.h, t); }, q.q0, q.T);
  q.fetch(qkv, 0, q.first_tile);
  async_commit();
  float lse2[2], dlt[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool real = q.row[r] < q.T;
    lse2[r] = real ? load<float>(lse, q.L.row(q.b, q.h, q.row[r])) * kLog2e : 0.f;
    dlt[r] = real ? delta[q.L.row(q.b, q.h, q.row[r])] : 0.f;
  }
  float dq[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.f;

  q.walk(qkv, [&](std::int64_t k0, int buf) {
    if (!q.warp_sees(k0)) return;
    const std::uint16_t* k_s = q.keys(buf);
    const std::uint16_t* v_s = q.values(buf);
    float sc[8][4], dp[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) sc[nt][c] = dp[nt][c] = 0.f;
    times_transposed<E, HD>(sc, q_s, warp * 16, k_s);
    times_transposed<E, HD>(dp, do_s, warp * 16, v_s);
    // dS in place of S.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2;
        const std::int64_t j = k0 + acc_col(nt, c), i = q.row[r];
        float p = 0.f;
        if (j <= i && j >= q.first[r] && j < q.T && i < q.T)
          p = exp2f(sc[nt][c] * scale.log2 + q.slope_log2 * static_cast<float>(j - i) - lse2[r]);
        sc[nt][c] = p * (dp[nt][c] - dlt[r]);
      }
    times_tile<E, HD>(dq, sc, k_s);
  });

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (q.row[r] >= q.T) continue;
    const std::int64_t at = q.L.q(q.b, q.h, q.row[r]);
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
      for (int c = 0; c < 2; ++c) store(dqkv, at + acc_col(dt, c), dq[dt][2 * r + c] * scale.natural);
  }
}

template <class Kernel>
void allow_shared(Kernel* kernel, std::size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        what);
}

template <class E, int HD>
void launch(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
            cudaStream_t stream) {
  const float natural = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  const Scales scale{natural * kLog2e, natural};
  const std::int64_t tiles = (s.seq + kRows - 1) / kRows;

  const std::size_t dkdv_shared =
      6 * tile_bytes(HD) + kRows * (2 * sizeof(float) + sizeof(std::int64_t));
  auto* dkdv = dkdv_kernel<E, HD>;
  allow_shared(dkdv, dkdv_shared, "cudaFuncSetAttribute (tensor-core attention dK/dV shared memory)");
  KINTSUGI_CUDA_LAUNCH(dkdv, static_cast<unsigned>(s.batch * s.kv_heads * tiles), kBlockThreads,
                       dkdv_shared, stream, s, qkv, lse, dout, delta, dqkv, scale, tiles);
  check_launch("tensor-core attention dkdv_kernel", stream);

  const std::size_t dq_shared = 6 * tile_bytes(HD);
  auto* dq = dq_kernel<E, HD>;
  allow_shared(dq, dq_shared, "cudaFuncSetAttribute (tensor-core attention dQ shared memory)");
  KINTSUGI_CUDA_LAUNCH(dq, static_cast<unsigned>(s.batch * s.heads * tiles), kBlockThreads,
                       dq_shared, stream, s, qkv, lse, dout, delta, dqkv, scale, tiles);
  check_launch("tensor-core attention dq_kernel", stream);
}

template <class E>
void backward_e(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
                cudaStream_t stream) {
  switch (s.head_dim) {
    case 16: return launch<E, 16>(s, qkv, lse, dout, delta, dqkv, stream);
    case 32: return launch<E, 32>(s, qkv, lse, dout, delta, dqkv, stream);
    case 64: return launch<E, 64>(s, qkv, lse, dout, delta, dqkv, stream);
    case 80: return launch<E, 80>(s, qkv, lse, dout, delta, dqkv, stream);
    case 96: return launch<E, 96>(s, qkv, lse, dout, delta, dqkv, stream);
    default: return launch<E, 128>(s, qkv, lse, dout, delta, dqkv, stream);
  }
}

}  // namespace

void backward(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
              cudaStream_t stream) {
  if (qkv.dtype == DType::bf16)
    backward_e<tc::Bf16>(s, qkv, lse, dout, delta, dqkv, stream);
  else
    backward_e<tc::F16>(s, qkv, lse, dout, delta, dqkv, stream);
}

}  // namespace kintsugi::cuda::attn_tc
