// Causal self-attention backward on the tensor cores, without atomics: the probabilities are
// recomputed from the saved log-sum-exp (P = exp(S - lse)), each gradient element summed in a
// fixed order. delta = dO . O per row comes from attention_backward.cu. Two schemes:
//
// Fused (5 products, the default): a block per (sequence, kv head, 64 keys), each warp 16 keys,
// walks every query head of the group and every query tile that sees its keys, with the keys
// as the products' rows:
//   S^T = K Q^T, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q,
// and this key tile's share of dQ, dS K (dS^T through shared memory, each warp 16 queries),
// written as an f32 partial tile per (key tile, query tile) to scratch. A second kernel sums
// each query row's partials in ascending key-tile order into dQ. Same inputs, same bits.
//
// Two kernels (7 products; KINTSUGI_ATTN_BWD_FUSED=0): the dK/dV kernel above without the dQ
// share, then a block per (sequence, head, 64 queries) that walks the key tiles its queries
// see, recomputing S = Q K^T and dP = dO V^T: dS = P (dP - delta), dQ += dS K.
#include <cmath>

#include "kintsugi/backend/cuda/attention_tc.cuh"
#include "kintsugi/backend/cuda/attention_tc.hpp"

namespace kintsugi::cuda::attn_tc {

namespace {

struct Scales {
  float log2;     // 1/sqrt(hd) * log2(e): scores in base 2
  float natural;  // 1/sqrt(hd): the chain rule's factor on dQ and dK
};

// The fused backward's dQ partials: per (sequence, head) of a slice of units, one kRows x HD f32
// tile per (key tile kt, query tile qt) with kt <= qt, the pairs causal attention has, packed
// query tile by query tile. A slice is units (sequence, kv head) unit_begin.. of the call.
constexpr std::int64_t tile_pairs(std::int64_t tiles) { return tiles * (tiles + 1) / 2; }
__device__ __forceinline__ std::int64_t pair_index(std::int64_t kt, std::int64_t qt) {
  return qt * (qt + 1) / 2 + kt;
}

std::size_t partial_bytes_per_unit(const AttnShape& s) {
  const std::int64_t tiles = (s.seq + kRows - 1) / kRows;
  return sizeof(float) * static_cast<std::size_t>((s.heads / s.kv_heads) * tile_pairs(tiles) *
                                                  kRows * s.head_dim);
}

// Units per slice when `bytes` of scratch are at hand, at most the variant's cap (0: not even
// one unit fits, the two-kernel backward runs): the fewest slices, of equal size but the last.
std::int64_t slice_units(const AttnShape& s, std::size_t bytes) {
  const std::int64_t units = s.batch * s.kv_heads;
  const std::size_t per_unit = partial_bytes_per_unit(s);
  if (units <= 0 || per_unit == 0) return 0;
  const auto most =
      static_cast<std::int64_t>(smaller(bytes, variant().fused_scratch_cap) / per_unit);
  if (most <= 0) return 0;
  const std::int64_t slices = (units + most - 1) / most;
  return (units + slices - 1) / slices;
}

// A key tile's share of dQ for warp w's 16 queries (w 0..3), dimensions C0..C0 + W - 1 with
// W = min(64, HD - C0) (accumulators for 64 at most: dK and dV already hold HD each): dS, read
// transposed from dS^T in shared memory, times K, over the 16-key blocks 0..hi, stored at
// element `tile` of the partials (a kRows x HD tile, this warp's rows 16 w..16 w + 15).
template <class E, int HD, int C0>
__device__ __forceinline__ void dq_share(const Ref& partial, std::int64_t tile,
                                         const std::uint16_t* ds_s, const std::uint16_t* k_s,
                                         int hi) {
  constexpr int kW = HD - C0 < 64 ? HD - C0 : 64;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  float acc[kW / 8][4];
#pragma unroll
  for (int dt = 0; dt < kW / 8; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk > hi) continue;
    std::uint32_t a[4];
    tc::ldmatrix_a_trans(a, ds_s, row_stride(kRows), warp * 16, kk * 16);
#pragma unroll
    for (int pair = 0; pair < kW / 16; ++pair) {
      std::uint32_t kb[4];
      tc::ldmatrix_b_kn(kb, k_s, row_stride(HD), C0 + pair * 16, kk * 16);
      tc::mma<E>(acc[2 * pair], a, {kb[0], kb[1]});
      tc::mma<E>(acc[2 * pair + 1], a, {kb[2], kb[3]});
    }
  }
  float* out = static_cast<float*>(partial.data);
#pragma unroll
  for (int dt = 0; dt < kW / 8; ++dt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::int64_t at = tile + (warp * 16 + g + 8 * r) * HD + C0 + acc_col(dt, 0);
      KINTSUGI_CUDA_CHECK_INDEX(partial, at);
      KINTSUGI_CUDA_CHECK_INDEX(partial, at + 1);
      store_pair(out + at, acc[dt][2 * r], acc[dt][2 * r + 1]);
    }
}

// One warp's 16 keys against a query tile, with the tile masks (dkdv_kernel fills it in).
struct KeyRows {
  const std::uint16_t *k_s, *v_s, *q_s, *do_s;
  std::uint16_t* ds_s;  // fused: dS^T
  const float *lse_s, *delta_s;
  const std::int32_t* first_s;  // per query: its document's first key
  int warp, g;
  // 32-bit offsets from the tile's first query: query col sees key r when
  // lo[r] <= col <= last and first_s[col] <= key[r]; ALiBi's j - i is rel[r] - col.
  int lo[2], rel[2], key[2], last;
  bool full, alibi;  // full: every query sees every key (no mask)
  float scale_log2, slope_log2;
  Blocks cols;  // the 16-query blocks some query of which sees a key of the warp
};

// What the exponent of P adds to the scaled score: ALiBi's bias (where the head has a slope)
// minus the row's log-sum-exp, so that P = 2^fma(s, scale, bias) with every multiply-add
// written out. Left to the compiler, s * scale - lse is fused or not depending on how it
// unrolls and unswitches the loop around it, and the kernel's variants (query passes, blocks
// per SM) would differ in the last bit.
__device__ __forceinline__ float exponent_bias(const KeyRows& a, int r, int col) {
  const float lse = a.lse_s[col];
  return a.alibi ? fmaf(a.slope_log2, static_cast<float>(a.rel[r] - col), -lse) : -lse;
}

// Query blocks kBlock0..kBlock0+kBlocks-1 of it: P^T and dS^T, dV += P^T dO, dK += dS^T Q and,
// fused, dS^T into shared memory. Each accumulator adds the blocks in ascending order whatever
// kBlocks is, so passes of fewer blocks give the same bits.
template <class E, int HD, bool kFused, int kBlock0, int kBlocks>
__device__ __forceinline__ void key_rows(const KeyRows& a, float (&dk)[HD / 8][4],
                                         float (&dv)[HD / 8][4]) {
  constexpr int kN = 2 * kBlocks, kLdS = row_stride(kRows);
  float st[kN][4], dpt[kN][4];
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) st[n][c] = dpt[n][c] = 0.f;
  times_transposed<E, HD, kBlock0, kBlocks>(st, a.k_s, a.warp * 16, a.q_s, a.cols.lo, a.cols.hi);
  times_transposed<E, HD, kBlock0, kBlocks>(dpt, a.v_s, a.warp * 16, a.do_s, a.cols.lo,
                                            a.cols.hi);
  if (a.full && !a.alibi) {
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = acc_col(2 * kBlock0 + n, c);
        const float p = exp2_fast(fmaf(st[n][c], a.scale_log2, -a.lse_s[col]));
        st[n][c] = p;
        dpt[n][c] = p * (dpt[n][c] - a.delta_s[col]);
      }
  } else {
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c / 2, col = acc_col(2 * kBlock0 + n, c);
        const bool seen =
            a.full || (col >= a.lo[r] && col <= a.last && a.first_s[col] <= a.key[r]);
        const float p = seen ? exp2_fast(fmaf(st[n][c], a.scale_log2, exponent_bias(a, r, col)))
                             : 0.f;
        st[n][c] = p;
        dpt[n][c] = p * (dpt[n][c] - a.delta_s[col]);
      }
  }
  std::uint32_t pp[kN][2], pds[kN][2];
  pack_rows<E>(pp, st);
  pack_rows<E>(pds, dpt);
  times_tile<E, HD, kBlock0, kBlocks>(dv, pp, a.do_s, a.cols.lo, a.cols.hi);
  times_tile<E, HD, kBlock0, kBlocks>(dk, pds, a.q_s, a.cols.lo, a.cols.hi);
  if constexpr (kFused) {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      tc::put_word(a.ds_s, kLdS, a.warp * 16 + a.g, acc_col(2 * kBlock0 + n, 0), pds[n][0]);
      tc::put_word(a.ds_s, kLdS, a.warp * 16 + a.g + 8, acc_col(2 * kBlock0 + n, 0), pds[n][1]);
    }
  }
}

// Blocks per SM the two backward kernels ask ptxas for in the more_blocks variant
// (attention_tc.hpp); 0: unspecified, ptxas's own choice.
constexpr int kMoreBlocksDkdv = 3, kMoreBlocksDq = 4;

template <class E, int HD, bool kTileMasks, bool kFused, int kMinBlocks = 0,
          bool kTwoPasses = false>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocks)
    dkdv_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
                Scales scale, std::int64_t k_tiles, Tuning tune, Ref partial,
                std::int64_t unit_begin, std::int64_t units) {
  static_assert(kTileMasks || !kFused, "the fused backward has the tile masks");
  constexpr int kLd = row_stride(HD), kDimTiles = HD / 8, kLdS = row_stride(kRows);
  std::uint16_t* k_s = dynamic_shared<std::uint16_t>();
  std::uint16_t* v_s = k_s + kRows * kLd;
  std::uint16_t* qdo_s = v_s + kRows * kLd;  // two buffers of (Q, dO): the next is copied early
  std::uint16_t* ds_s = qdo_s + 4 * kRows * kLd;  // fused: dS^T, [64 keys][64 queries]
  float* lse_s = reinterpret_cast<float*>(ds_s + (kFused ? kRows * kLdS : 0));  // base 2
  float* delta_s = lse_s + kRows;
  std::int64_t* first_s = reinterpret_cast<std::int64_t*>(delta_s + kRows);
  std::int32_t* first32_s = reinterpret_cast<std::int32_t*>(first_s);  // with the tile masks
  const attn::QkvIndex L(s);
  const std::int64_t T = s.seq;
  // Key tile 0 sees every query tile: ranks are key tiles, the heaviest first.
  const BlockTile bt = block_tile(units, k_tiles, tune.order_group);
  const std::int64_t unit = bt.unit, bk = unit_begin + unit, kt = bt.rank, k0 = kt * kRows;
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
  // so every later tile's does too). dq_sum_kernel reads the partials of the same pairs.
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
      // Past the end: sees nothing.
      if constexpr (kTileMasks)
        first32_s[r] = static_cast<std::int32_t>(i < T ? attn::first_key(s, b, i) : T);
      else
        first_s[r] = i < T ? attn::first_key(s, b, i) : T;
    }
    async_wait<1>();  // all but the copies just issued (K and V came with the first pair)
    __syncthreads();
    const float slope_log2 = static_cast<float>(attn::head_slope(s, h)) * kLog2e;
    const std::uint16_t* q_s = qdo_s + buf * 2 * kRows * kLd;
    const std::uint16_t* do_s = q_s + kRows * kLd;
    // Only warps whose keys some query of the tile sees (uniform across the warp).
    const bool sees = warp_key < T && attn::first_key(s, b, q0) <= warp_key + 15;
    if (sees) {
      // The 16-query blocks the warp's keys may meet: from its first key (diagonal tile) to
      // the end of the sequence.
      Blocks cols{0, 3};
      if (kTileMasks && tune.skip_masked) {
        const std::int64_t lo = (warp_key - q0) / kBlock, hi = (T - 1 - q0) / kBlock;
        cols = {lo > 0 ? static_cast<int>(lo) : 0, hi < 3 ? static_cast<int>(hi) : 3};
      }
      // P^T and dS^T in place of S^T and dP^T: rows are keys, columns queries.
      if constexpr (!kTileMasks) {
        float st[8][4], dpt[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) st[nt][c] = dpt[nt][c] = 0.f;
        times_transposed<E, HD>(st, k_s, warp * 16, q_s);
        times_transposed<E, HD>(dpt, v_s, warp * 16, do_s);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int col = acc_col(nt, c);
            const std::int64_t j = key[c / 2], i = q0 + col;
            float p = 0.f;
            if (i >= j && j >= first_s[col] && i < T && j < T)
              p = exp2f(st[nt][c] * scale.log2 + slope_log2 * static_cast<float>(j - i) -
                        lse_s[col]);
            st[nt][c] = p;
            dpt[nt][c] = p * (dpt[nt][c] - delta_s[col]);
          }
        times_tile<E, HD>(dv, st, do_s);
        times_tile<E, HD>(dk, dpt, q_s);
      } else {
        KeyRows a{k_s, v_s, q_s, do_s, ds_s, lse_s, delta_s, first32_s, warp, g};
        // Full: every query of the tile sees every key of the warp (keys up to the first
        // query, the whole tile inside the sequence, no document starting after the keys).
        a.full = warp_key + 15 <= q0 && q0 + kRows <= T && first32_s[kRows - 1] <= warp_key;
        a.alibi = slope_log2 != 0.f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          a.rel[r] = static_cast<int>(key[r] - q0);
          a.lo[r] = key[r] < T ? a.rel[r] : kRows;
          a.key[r] = static_cast<int>(key[r]);
        }
        a.last = static_cast<int>(T - 1 - q0);
        a.scale_log2 = scale.log2;
        a.slope_log2 = slope_log2;
        a.cols = cols;
        // Head sizes from 96 on take the queries in two passes of 32: S^T and dP^T of 64
        // queries next to dK and dV (HD f32 each) would not fit in the registers. Smaller
        // ones do in the dkdv_two_passes variant (attention_tc.hpp).
        constexpr int kPasses = HD >= 96 || kTwoPasses ? 2 : 1;
        key_rows<E, HD, kFused, 0, 4 / kPasses>(a, dk, dv);
        if constexpr (kPasses == 2) key_rows<E, HD, kFused, 2, 2>(a, dk, dv);
      }
    } else if constexpr (kFused) {  // keys no query of the tile sees: dS^T is zero
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        tc::put_word(ds_s, kLdS, warp * 16 + g, acc_col(nt, 0), 0u);
        tc::put_word(ds_s, kLdS, warp * 16 + g + 8, acc_col(nt, 0), 0u);
      }
    }
    if constexpr (kFused) {
      __syncthreads();  // dS^T of every warp's keys
      // This key tile's share of dQ for the warp's 16 queries: dS (dS^T read transposed) K.
      const std::int64_t warp_query = q0 + warp * 16;
      if (warp_query < T) {
        int hi = 3;  // keys after the warp's last query are masked: their dS is zero
        if (tune.skip_masked) {
          const std::int64_t last_key = smaller(warp_query + 15, T - 1);
          hi = static_cast<int>(smaller<std::int64_t>(3, (last_key - k0) / kBlock));
        }
        const std::int64_t tile =
            ((unit * L.group + (h - kvh * L.group)) * tile_pairs(k_tiles) +
             pair_index(kt, q0 / kRows)) *
            kRows * HD;
        dq_share<E, HD, 0>(partial, tile, ds_s, k_s, hi);
        if constexpr (HD > 64) dq_share<E, HD, 64>(partial, tile, ds_s, k_s, hi);
      }
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

template <class E, int HD, bool kTileMasks, int kMinBlocks = 0>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocks)
    dq_kernel(AttnShape s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv, Scales scale,
              std::int64_t q_tiles, Tuning tune) {
  constexpr int kLd = row_stride(HD), kDimTiles = HD / 8;
  std::uint16_t* q_s = dynamic_shared<std::uint16_t>();
  std::uint16_t* do_s = q_s + kRows * kLd;  // then the key/value buffers
  const QueryTile<E, HD> q(s, q_tiles, do_s + kRows * kLd, tune.order_group);
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
  const bool alibi = q.slope_log2 != 0.f;

  q.walk(qkv, [&](std::int64_t k0, int buf) {
    if (!q.warp_sees(k0)) return;
    const std::uint16_t* k_s = q.keys(buf);
    const std::uint16_t* v_s = q.values(buf);
    const Blocks blocks = kTileMasks ? q.key_blocks(k0, tune.skip_masked) : Blocks{0, 3};
    float sc[8][4], dp[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) sc[nt][c] = dp[nt][c] = 0.f;
    times_transposed<E, HD>(sc, q_s, warp * 16, k_s, blocks.lo, blocks.hi);
    times_transposed<E, HD>(dp, do_s, warp * 16, v_s, blocks.lo, blocks.hi);
    // dS in place of S.
    if constexpr (!kTileMasks) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int r = c / 2;
          const std::int64_t j = k0 + acc_col(nt, c), i = q.row[r];
          float p = 0.f;
          if (j <= i && j >= q.first[r] && j < q.T && i < q.T)
            p = exp2f(sc[nt][c] * scale.log2 + q.slope_log2 * static_cast<float>(j - i) -
                      lse2[r]);
          sc[nt][c] = p * (dp[nt][c] - dlt[r]);
        }
      times_tile<E, HD>(dq, sc, k_s);
    } else {
      const bool full = q.full(k0);
      if (full && !alibi) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int r = c / 2;
            const float p = exp2_fast(fmaf(sc[nt][c], scale.log2, -lse2[r]));
            sc[nt][c] = p * (dp[nt][c] - dlt[r]);
          }
      } else {
        const Limits lim = q.limits(k0);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int r = c / 2, col = acc_col(nt, c);
            // As exponent_bias: every multiply-add written out.
            const float bias =
                alibi ? fmaf(q.slope_log2, static_cast<float>(col - lim.rel[r]), -lse2[r])
                      : -lse2[r];
            const bool seen = full || (col >= lim.lo[r] && col <= lim.hi[r]);
            const float p = seen ? exp2_fast(fmaf(sc[nt][c], scale.log2, bias)) : 0.f;
            sc[nt][c] = p * (dp[nt][c] - dlt[r]);
          }
      }
      std::uint32_t pds[8][2];
      pack_rows<E>(pds, sc);
      times_tile<E, HD>(dq, pds, k_s, blocks.lo, blocks.hi);
    }
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

// dQ of a slice: each query row's partials summed over the key tiles that wrote them (those
// from its tile's first document's tile to its own, as dkdv_kernel's walk visits them) in
// ascending order, scaled, rounded once into dqkv. Four dimensions per thread, consecutive
// threads along a row: the partial tiles are read in 512-byte runs per warp.
template <int HD>
__global__ void dq_sum_kernel(AttnShape s, Ref partial, Ref dqkv, float natural,
                              std::int64_t tiles, std::int64_t unit_begin, std::int64_t units) {
  constexpr int kQuads = HD / 4;
  const attn::QkvIndex L(s);
  const std::int64_t n = units * L.group * s.seq * kQuads;
  for (std::int64_t idx = global_index(); idx < n; idx += global_stride()) {
    const int d = static_cast<int>(idx % kQuads) * 4;
    const std::int64_t rest = idx / kQuads, t = rest % s.seq, uh = rest / s.seq;
    const std::int64_t bk = unit_begin + uh / L.group;
    const std::int64_t b = bk / s.kv_heads, h = (bk % s.kv_heads) * L.group + uh % L.group;
    const std::int64_t qt = t / kRows, first = attn::first_key(s, b, qt * kRows) / kRows;
    const std::int64_t row = (uh * tile_pairs(tiles) + pair_index(0, qt)) * kRows * HD +
                             (t % kRows) * HD + d;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (std::int64_t kt = first; kt <= qt; ++kt) {
      const std::int64_t at = row + kt * kRows * HD;
      KINTSUGI_CUDA_CHECK_INDEX(partial, at);
      KINTSUGI_CUDA_CHECK_INDEX(partial, at + 3);
      const float* p = static_cast<const float*>(partial.data) + at;
#ifdef __CUDA_ARCH__
      const float4 v = *reinterpret_cast<const float4*>(p);
      const float part[4] = {v.x, v.y, v.z, v.w};
#else
      const float part[4] = {p[0], p[1], p[2], p[3]};
#endif
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] += part[c];
    }
    const std::int64_t at = L.q(b, h, t) + d;
#pragma unroll
    for (int c = 0; c < 4; ++c) store(dqkv, at + c, acc[c] * natural);
  }
}

template <class Kernel>
void allow_shared(Kernel* kernel, std::size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        what);
}

std::size_t dkdv_shared(int hd, bool fused) {
  return 6 * tile_bytes(hd) + (fused ? tile_bytes(kRows) : 0) +
         kRows * (2 * sizeof(float) + sizeof(std::int64_t));
}

template <class E, int HD>
void launch(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
            Scratch partials, cudaStream_t stream) {
  const Variant v = variant();
  const Tuning tune = tuning(v);
  const float natural = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  const Scales scale{natural * kLog2e, natural};
  const std::int64_t tiles = (s.seq + kRows - 1) / kRows, units = s.batch * s.kv_heads;

  const std::int64_t slice =
      v.tile_masks && v.fused_backward ? slice_units(s, partials.bytes) : 0;
  if (slice > 0) {
    auto* fused = dkdv_kernel<E, HD, true, true>;
    const std::size_t shared = dkdv_shared(HD, true);
    allow_shared(fused, shared, "cudaFuncSetAttribute (tensor-core attention fused backward)");
    const Ref partial{partials.data, DType::f32,
                      static_cast<std::int64_t>(partials.bytes / sizeof(float))};
    for (std::int64_t begin = 0; begin < units; begin += slice) {
      const std::int64_t n = smaller(slice, units - begin);
      KINTSUGI_CUDA_LAUNCH(fused, static_cast<unsigned>(n * tiles), kBlockThreads, shared,
                           stream, s, qkv, lse, dout, delta, dqkv, scale, tiles, tune, partial,
                           begin, n);
      check_launch("tensor-core attention fused backward (dkdv_kernel)", stream);
      KINTSUGI_CUDA_LAUNCH(dq_sum_kernel<HD>, grid_for(n * (s.heads / s.kv_heads) * s.seq * HD / 4),
                           kThreads, 0, stream, s, partial, dqkv, natural, tiles, begin, n);
      check_launch("tensor-core attention dq_sum_kernel", stream);
    }
    return;
  }

  auto* dkdv = v.tile_masks ? dkdv_kernel<E, HD, true, false> : dkdv_kernel<E, HD, false, false>;
  auto* dq = v.tile_masks ? dq_kernel<E, HD, true> : dq_kernel<E, HD, false>;
  // The more_blocks and dkdv_two_passes variants: head sizes up to 64 (larger ones hold more
  // accumulators than the capped registers would keep without heavy spills). The two-pass
  // kernel is compiled for 3 blocks per SM either way: it fits them without spills.
  if constexpr (HD <= 64) {
    if (v.more_blocks_dkdv && v.tile_masks) dkdv = dkdv_kernel<E, HD, true, false, kMoreBlocksDkdv>;
    if (v.dkdv_two_passes && v.tile_masks)
      dkdv = dkdv_kernel<E, HD, true, false, kMoreBlocksDkdv, true>;
    if (v.more_blocks_dq && v.tile_masks) dq = dq_kernel<E, HD, true, kMoreBlocksDq>;
  }
  const std::size_t shared = dkdv_shared(HD, false);
  allow_shared(dkdv, shared, "cudaFuncSetAttribute (tensor-core attention dK/dV shared memory)");
  KINTSUGI_CUDA_LAUNCH(dkdv, static_cast<unsigned>(units * tiles), kBlockThreads, shared, stream,
                       s, qkv, lse, dout, delta, dqkv, scale, tiles, tune, Ref{}, 0, units);
  check_launch("tensor-core attention dkdv_kernel", stream);

  const std::size_t dq_shared = 6 * tile_bytes(HD);
  allow_shared(dq, dq_shared, "cudaFuncSetAttribute (tensor-core attention dQ shared memory)");
  KINTSUGI_CUDA_LAUNCH(dq, static_cast<unsigned>(s.batch * s.heads * tiles), kBlockThreads,
                       dq_shared, stream, s, qkv, lse, dout, delta, dqkv, scale, tiles, tune);
  check_launch("tensor-core attention dq_kernel", stream);
}

template <class E>
void backward_e(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
                Scratch partials, cudaStream_t stream) {
  switch (s.head_dim) {
    case 16: return launch<E, 16>(s, qkv, lse, dout, delta, dqkv, partials, stream);
    case 32: return launch<E, 32>(s, qkv, lse, dout, delta, dqkv, partials, stream);
    case 64: return launch<E, 64>(s, qkv, lse, dout, delta, dqkv, partials, stream);
    case 80: return launch<E, 80>(s, qkv, lse, dout, delta, dqkv, partials, stream);
    case 96: return launch<E, 96>(s, qkv, lse, dout, delta, dqkv, partials, stream);
    default: return launch<E, 128>(s, qkv, lse, dout, delta, dqkv, partials, stream);
  }
}

}  // namespace

std::size_t backward_scratch_bytes(const AttnShape& s) {
  const Variant v = variant();
  const std::int64_t hd = s.head_dim;
  if (!(v.tensor_cores && v.tile_masks && v.fused_backward) || s.kv_heads <= 0 ||
      !(hd == 16 || hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128))
    return 0;
  return static_cast<std::size_t>(slice_units(s, v.fused_scratch_cap)) * partial_bytes_per_unit(s);
}

void backward(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
              Scratch partials, cudaStream_t stream) {
  if (qkv.dtype == DType::bf16)
    backward_e<tc::Bf16>(s, qkv, lse, dout, delta, dqkv, partials, stream);
  else
    backward_e<tc::F16>(s, qkv, lse, dout, delta, dqkv, partials, stream);
}

}  // namespace kintsugi::cuda::attn_tc
