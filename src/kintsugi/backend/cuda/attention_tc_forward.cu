// Causal self-attention forward on the tensor cores (FlashAttention-2's scheme): a block takes
// 64 queries of one (sequence, head), each warp 16 of them, and walks the key tiles they may
// see. S = Q K^T and O += P V are m16n8k16 products; the online softmax (running maximum and
// sum per row, in base 2) works on the accumulators in registers, and P goes from the S
// accumulators straight into the A fragments of P V. Only each row's log-sum-exp is kept.
#include <cmath>

#include "kintsugi/backend/cuda/attention_tc.cuh"
#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda::attn_tc {

namespace {

// Scores of one warp's 16 rows against key tile k0 in base 2, scaled, with ALiBi and the
// masks (keys past the end too), and the running maximum mx of each row (a lane holds columns
// of rows g and g + 8), as the first kernels computed them: 64-bit positions on every element
// of every tile. KINTSUGI_ATTN_TILE_MASKS=0 keeps this for comparison.
template <class E, int HD>
__device__ __forceinline__ void scores_every_element(float (&sc)[8][4], float (&mx)[2],
                                                     const QueryTile<E, HD>& q, std::int64_t k0,
                                                     float scale_log2) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = c / 2;
      const std::int64_t j = k0 + acc_col(nt, c), i = q.row[r];
      float v = sc[nt][c] * scale_log2 + q.slope_log2 * static_cast<float>(j - i);
      if (j > i || j < q.first[r] || j >= q.T) v = -INFINITY;
      sc[nt][c] = v;
      mx[r] = fmaxf(mx[r], v);
    }
}

// With the tile masks at least one block per SM is asked for explicitly: without it ptxas
// traded spills for a fourth block at head size 32 (128 registers, 20 bytes spilled) and 80
// (168, 64 bytes); with it none spills (0: unspecified, the first kernels as they were).
template <class E, int HD, bool kTileMasks>
__global__ void __launch_bounds__(kBlockThreads, kTileMasks ? 1 : 0)
    forward_kernel(AttnShape s, Ref qkv, Ref out, Ref lse, float scale_log2,
                   std::int64_t q_tiles, Tuning tune) {
  constexpr int kLd = row_stride(HD), kSteps = HD / 16, kDimTiles = HD / 8;
  std::uint16_t* q_s = dynamic_shared<std::uint16_t>();  // then the key/value buffers
  const QueryTile<E, HD> q(s, q_tiles, q_s + kRows * kLd, tune.order_group);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile<E, HD>(
      q_s, qkv, [&](std::int64_t t) { return q.L.q(q.b, q.h, t); }, q.q0, q.T);
  q.fetch(qkv, 0, q.first_tile);
  async_commit();

  std::uint32_t qf[kSteps][4];
  float o[kDimTiles][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  const bool alibi = q.slope_log2 != 0.f;

  q.walk(qkv, [&](std::int64_t k0, int buf) {
    if (k0 == q.first_tile) {
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) tc::ldmatrix_a(qf[ks], q_s, kLd, warp * 16, ks * 16);
    }
    if (!q.warp_sees(k0)) return;
    const std::uint16_t* k_s = q.keys(buf);
    const std::uint16_t* v_s = q.values(buf);
    // Full tiles without ALiBi keep raw scores: max and exponent take the scale in one FMA.
    const bool full = kTileMasks && q.full(k0);
    const bool raw = full && !alibi;
    const Blocks blocks = kTileMasks ? q.key_blocks(k0, tune.skip_masked) : Blocks{0, 3};
    float sc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
    for (int np = 0; np < 4; ++np) {  // pairs of 8-key product tiles
      if (np < blocks.lo || np > blocks.hi) continue;
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        std::uint32_t kb[4];
        tc::ldmatrix_b_nk(kb, k_s, kLd, np * 16, ks * 16);
        tc::mma<E>(sc[2 * np], qf[ks], {kb[0], kb[1]});
        tc::mma<E>(sc[2 * np + 1], qf[ks], {kb[2], kb[3]});
      }
    }
    float mx[2] = {m[0], m[1]};
    if constexpr (!kTileMasks) {
      scores_every_element(sc, mx, q, k0, scale_log2);
    } else if (raw) {
      float top[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) top[c / 2] = fmaxf(top[c / 2], sc[nt][c]);
      // Rounding is monotonic: max(x) * scale is the max of the rounded x * scale.
      mx[0] = fmaxf(mx[0], top[0] * scale_log2);
      mx[1] = fmaxf(mx[1], top[1] * scale_log2);
    } else {  // masks in 32-bit offsets from k0, ALiBi where the head has a slope
      const Limits lim = q.limits(k0);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int r = c / 2, col = acc_col(nt, c);
          float v = sc[nt][c] * scale_log2;
          if (alibi) v += q.slope_log2 * static_cast<float>(col - lim.rel[r]);
          if (!full && (col < lim.lo[r] || col > lim.hi[r])) v = -INFINITY;
          sc[nt][c] = v;
          mx[r] = fmaxf(mx[r], v);
        }
    }
    float base[2], correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // a row's 64 scores sit in the 4 lanes of a quad
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // A row that has seen no key yet (a document starting later) keeps zeros, not NaNs.
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];
      correction[r] = kTileMasks ? exp2_fast(m[r] - base[r]) : exp2f(m[r] - base[r]);
      m[r] = mx[r];
      l[r] *= correction[r];
    }
    // Raw scores are scaled here; scaled ones are multiplied by 1 (exact: x - base as before).
    const float factor = raw ? scale_log2 : 1.f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float p;
        if constexpr (!kTileMasks)
          p = exp2f(sc[nt][c] - base[c / 2]);
        else
          p = exp2_fast(fmaf(sc[nt][c], factor, -base[c / 2]));
        sc[nt][c] = p;
        l[c / 2] += p;
      }
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }
    if constexpr (kTileMasks) {
      std::uint32_t pk[8][2];
      pack_rows<E>(pk, sc);
      times_tile<E, HD>(o, pk, v_s, blocks.lo, blocks.hi);
    } else {
      times_tile<E, HD>(o, sc, v_s);
    }
  });

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (q.row[r] >= q.T) continue;
    const float inv = 1.f / l[r];
    const std::int64_t at = q.L.o(q.b, q.h, q.row[r]);
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      store(out, at + acc_col(dt, 0), o[dt][2 * r] * inv);
      store(out, at + acc_col(dt, 1), o[dt][2 * r + 1] * inv);
    }
    if (lane % 4 == 0) store(lse, q.L.row(q.b, q.h, q.row[r]), (m[r] + log2f(l[r])) * kLn2);
  }
}

template <class E, int HD>
void launch(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  const std::int64_t q_tiles = (s.seq + kRows - 1) / kRows;
  const std::size_t shared = 5 * tile_bytes(HD);
  const Variant v = variant();
  auto* kernel = v.tile_masks ? forward_kernel<E, HD, true> : forward_kernel<E, HD, false>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "cudaFuncSetAttribute (tensor-core attention forward shared memory)");
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(s.head_dim));
  KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(s.batch * s.heads * q_tiles), kBlockThreads,
                       shared, stream, s, qkv, out, lse, scale_log2, q_tiles, tuning(v));
  check_launch("tensor-core attention forward_kernel", stream);
}

template <class E>
void forward_e(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  switch (s.head_dim) {
    case 16: return launch<E, 16>(s, qkv, out, lse, stream);
    case 32: return launch<E, 32>(s, qkv, out, lse, stream);
    case 64: return launch<E, 64>(s, qkv, out, lse, stream);
    case 80: return launch<E, 80>(s, qkv, out, lse, stream);
    case 96: return launch<E, 96>(s, qkv, out, lse, stream);
    default: return launch<E, 128>(s, qkv, out, lse, stream);
  }
}

}  // namespace

bool takes(const AttnShape& s, const Ref& qkv) {
  const std::int64_t hd = s.head_dim;
  return variant().tensor_cores && (qkv.dtype == DType::bf16 || qkv.dtype == DType::f16) &&
         (hd == 16 || hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128);
}

void forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  if (qkv.dtype == DType::bf16)
    forward_e<tc::Bf16>(s, qkv, out, lse, stream);
  else
    forward_e<tc::F16>(s, qkv, out, lse, stream);
}

}  // namespace kintsugi::cuda::attn_tc
