#pragma once
// Pieces shared by the tensor-core attention kernels (attention_tc_forward.cu,
// attention_tc_backward.cu): which calls they take, tile geometry, and tile loads from global
// memory into shared memory as 16-bit elements.
//
// A block has 4 warps; a tile has 64 rows (queries or keys), 16 per warp, which is the M of one
// m16n8k16 product. Tile rows are padded by 8 elements (16 bytes) so that the 8 rows an ldmatrix
// reads at once fall in different banks for every head size the kernels take.
#include <cstdint>

#include "kintsugi/backend/cuda/attention_common.cuh"
#include "kintsugi/backend/cuda/attention_tc.hpp"
#include "kintsugi/backend/cuda/tensor_core.cuh"

namespace kintsugi::cuda::attn_tc {

constexpr int kRows = 64;  // queries or keys per tile
constexpr int kWarps = 4;  // each owns 16 of the tile's rows
constexpr int kBlockThreads = kWarps * 32;
constexpr int kPad = 8;    // elements of padding per tile row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kBlock = 16;  // keys or queries per 16-deep product: a tile has 4 such blocks

constexpr int row_stride(int hd) { return hd + kPad; }  // of a row-major tile ([rows][hd])
constexpr std::size_t tile_bytes(int hd) { return sizeof(std::uint16_t) * kRows * row_stride(hd); }

// How a launch orders and trims its work, from the Variant (attention_tc.hpp); the first
// kernels' behaviour is order_group 1 and skip_masked false.
struct Tuning {
  // Blocks go out in groups of this many (sequence, head) units, each group's tiles heaviest
  // first across its units: the causal triangle gives a tile 1 to T/64 tiles of work, and a
  // heavy tile dispatched last keeps its SM busy while the others idle. A group's units share
  // their keys and values in L2 (32 units of T = 1024, hd = 64: 8 MiB of the H200's 50).
  std::int64_t order_group = 1;
  // Products over 16-key (or 16-query) blocks that the causal mask hides from a whole warp are
  // skipped: on a diagonal tile warp w of 4 needs w + 1 of the 4 blocks.
  bool skip_masked = false;
};

constexpr std::int64_t kOrderGroup = 32;
inline Tuning tuning(const Variant& v) {
  return {v.heavy_first ? kOrderGroup : 1, v.tile_masks && v.skip_masked};
}

// The (unit, rank) block blockIdx.x takes in a launch of units x tiles blocks: rank 0 is the
// heaviest tile of its unit. With order_group 1 this is unit-major, rank-minor.
struct BlockTile {
  std::int64_t unit, rank;
};
__device__ __forceinline__ BlockTile block_tile(std::int64_t units, std::int64_t tiles,
                                                std::int64_t order_group) {
  const std::int64_t per_group = order_group * tiles, g = blockIdx.x / per_group;
  const std::int64_t idx = blockIdx.x % per_group;
  const std::int64_t size = smaller(order_group, units - g * order_group);  // the last: fewer
  return {g * order_group + idx % size, idx / size};
}

// 2^x on the special-function unit alone (ex2.approx.ftz): exp2f adds a scaling for results
// below 2^-126, which flush to zero here; probabilities that small vanish in P's 16-bit
// rounding and in a row sum of at least 1 anyway. The emulator computes exp2f.
__device__ __forceinline__ float exp2_fast(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// Two f32 values to global memory at p (8-byte aligned), as one access on the GPU.
__device__ __forceinline__ void store_pair(float* p, float a, float b) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
#else
  p[0] = a;
  p[1] = b;
#endif
}

// Asynchronous 16-byte copies from global to shared memory (cp.async): the copy does not pass
// through registers, so a block fetches its next tile while it computes on the current one.
// `valid` false writes zeros. async_commit closes a group of copies; async_wait<N> waits until at
// most N groups are still in flight (a __syncthreads() then makes them visible to the block).
// The emulator copies at once.
__device__ __forceinline__ void copy16_async(std::uint16_t* dst, const std::uint16_t* src,
                                             bool valid) {
#ifdef __CUDA_ARCH__
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(valid ? 16 : 0));
#else
  store16(dst, valid ? load16(src) : uint4{0u, 0u, 0u, 0u});
#endif
}
__device__ __forceinline__ void async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void async_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Rows t0..t0+63 of a [*, HD] slice (element first(t) + d of row t; zeros past seq) into a
// row-major tile [64][HD + 8]. Sources of the kernels' own type are copied asynchronously, 16
// bytes at a time (every row starts at a multiple of HD elements, so an aligned base keeps them
// aligned): the caller commits and waits. Others (an f32 gradient) are read element by element
// and rounded once, at once. Products that need a tile transposed read it with ldmatrix's
// transpose, so no transposed copy is kept.
template <class E, int HD, class First>
__device__ void load_tile(std::uint16_t* tile, const Ref& src, First first, std::int64_t t0,
                          std::int64_t seq) {
  constexpr int kChunks = HD / 8;
  const bool whole =
      src.dtype == E::dtype && reinterpret_cast<std::uintptr_t>(src.data) % 16 == 0;
  const auto* base = static_cast<const std::uint16_t*>(src.data);
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const std::int64_t t = t0 + r;
    std::uint16_t* dst = tile + r * row_stride(HD) + c;
    const std::int64_t at = t < seq ? first(t) + c : 0;
    if (whole) {
      if (t < seq) {
        KINTSUGI_CUDA_CHECK_INDEX(src, at);
        KINTSUGI_CUDA_CHECK_INDEX(src, at + 7);
      }
      copy16_async(dst, base + at, t < seq);
      continue;
    }
    uint4 v{0u, 0u, 0u, 0u};
    if (t < seq)
      v = {tc::pack2<E>(load<float>(src, at), load<float>(src, at + 1)),
           tc::pack2<E>(load<float>(src, at + 2), load<float>(src, at + 3)),
           tc::pack2<E>(load<float>(src, at + 4), load<float>(src, at + 5)),
           tc::pack2<E>(load<float>(src, at + 6), load<float>(src, at + 7))};
    store16(dst, v);
  }
}

// The first key a row sees (0 for the padding rows past seq, which are never written).
__device__ __forceinline__ std::int64_t first_key_or_zero(const AttnShape& s, std::int64_t b,
                                                          std::int64_t t) {
  return t < s.seq ? attn::first_key(s, b, t) : 0;
}

// Column c (0..3) of a lane's accumulator pair in an 8-wide product tile nt: the tile column.
__device__ __forceinline__ int acc_col(int nt, int c) {
  return nt * 8 + 2 * (static_cast<int>(threadIdx.x) % 4) + (c & 1);
}

// The accumulators of product tiles 2kk and 2kk + 1 (rows r, 16 columns) as the A fragment of a
// 16-deep product, rounded to E.
template <class E>
__device__ __forceinline__ void to_a(std::uint32_t (&a)[4], const float (&lo)[4],
                                     const float (&hi)[4]) {
  a[0] = tc::pack2<E>(lo[0], lo[1]);
  a[1] = tc::pack2<E>(lo[2], lo[3]);
  a[2] = tc::pack2<E>(hi[0], hi[1]);
  a[3] = tc::pack2<E>(hi[2], hi[3]);
}

// The two products every attention kernel is made of, for one warp's 16 rows.
//
// acc[n] += A B^T over the tile's 64 rows: A is rows a_row0..a_row0+15 of the row-major tile
// `a` ([64][HD]), B^T the row-major tile `b` ([64][HD]), so acc holds a 16 x 64 block (8 product
// tiles of 8 columns) of, e.g., S = Q K^T. Only the 16-column blocks lo..hi are computed (the
// others keep what acc held); with kBlocks < 4, acc holds blocks kBlock0..kBlock0+kBlocks-1.
template <class E, int HD, int kBlock0 = 0, int kBlocks = 4>
__device__ __forceinline__ void times_transposed(float (&acc)[2 * kBlocks][4],
                                                 const std::uint16_t* a, int a_row0,
                                                 const std::uint16_t* b, int lo = 0, int hi = 3) {
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    std::uint32_t af[4];
    tc::ldmatrix_a(af, a, row_stride(HD), a_row0, ks * 16);
#pragma unroll
    for (int n = 0; n < kBlocks; ++n) {  // pairs of 8-column product tiles
      const int np = kBlock0 + n;
      if (np < lo || np > hi) continue;
      std::uint32_t bf[4];
      tc::ldmatrix_b_nk(bf, b, row_stride(HD), np * 16, ks * 16);
      tc::mma<E>(acc[2 * n], af, {bf[0], bf[1]});
      tc::mma<E>(acc[2 * n + 1], af, {bf[2], bf[3]});
    }
  }
}

// acc += A times the 16-deep block kk of V: A one packed 16 x 16 fragment of P (rows of the
// warp, columns kk * 16..), V as in times_tile below; all HD / 8 product tiles of acc.
template <class E, int HD>
__device__ __forceinline__ void times_block(float (&acc)[HD / 8][4], const std::uint32_t (&pa)[4],
                                            const std::uint16_t* v, int kk) {
#pragma unroll
  for (int pair = 0; pair < HD / 16; ++pair) {
    std::uint32_t vb[4];
    tc::ldmatrix_b_kn(vb, v, row_stride(HD), pair * 16, kk * 16);
    tc::mma<E>(acc[2 * pair], pa, {vb[0], vb[1]});
    tc::mma<E>(acc[2 * pair + 1], pa, {vb[2], vb[3]});
  }
}

// acc[n] += P V: P is a 16 x 64 block held as accumulators (as times_transposed leaves them;
// rounded to E here), V the row-major tile `v` ([64][HD]) whose rows are the product's depth,
// so acc holds 16 x HD (HD / 8 product tiles), e.g. O += P V or dQ += dS K.
template <class E, int HD>
__device__ __forceinline__ void times_tile(float (&acc)[HD / 8][4], const float (&p)[8][4],
                                           const std::uint16_t* v) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    std::uint32_t pa[4];
    to_a<E>(pa, p[2 * kk], p[2 * kk + 1]);
    times_block<E, HD>(acc, pa, v, kk);
  }
}

// The same with P already rounded and packed (pack_rows), over the 16-deep blocks lo..hi only
// (P is zero in the others). Packing once lets one P feed two products and shared memory
// without being kept in f32. With kBlocks < 4, p holds blocks kBlock0..kBlock0+kBlocks-1.
template <class E, int N>
__device__ __forceinline__ void pack_rows(std::uint32_t (&packed)[N][2], const float (&p)[N][4]) {
#pragma unroll
  for (int nt = 0; nt < N; ++nt) {
    packed[nt][0] = tc::pack2<E>(p[nt][0], p[nt][1]);  // row g
    packed[nt][1] = tc::pack2<E>(p[nt][2], p[nt][3]);  // row g + 8
  }
}
template <class E, int HD, int kBlock0 = 0, int kBlocks = 4>
__device__ __forceinline__ void times_tile(float (&acc)[HD / 8][4],
                                           const std::uint32_t (&p)[2 * kBlocks][2],
                                           const std::uint16_t* v, int lo, int hi) {
#pragma unroll
  for (int n = 0; n < kBlocks; ++n) {
    const int kk = kBlock0 + n;
    if (kk < lo || kk > hi) continue;
    const std::uint32_t pa[4] = {p[2 * n][0], p[2 * n][1], p[2 * n + 1][0], p[2 * n + 1][1]};
    times_block<E, HD>(acc, pa, v, kk);
  }
}

// Which 16-column blocks of a tile a warp computes: lo..hi.
struct Blocks {
  int lo, hi;
};

// A lane's two rows against one tile, in 32-bit offsets from the tile's first column: column c
// is visible to row r when lo[r] <= c <= hi[r], and ALiBi's j - i is c - rel[r].
struct Limits {
  int lo[2], hi[2], rel[2];
};

// The 64 queries of one (sequence, head) that a block of the forward or the dQ kernel takes,
// what this lane's rows and this warp see, and the walk over the key tiles they see: K and V
// double-buffered in `kv` (two [K tile, V tile] pairs), the next pair copied while the current
// one is used.
template <class E, int HD>
struct QueryTile {
  attn::QkvIndex L;
  std::int64_t T, b, h, kvh, q0;
  std::int64_t warp_row;    // the warp's first query
  std::int64_t row[2];      // this lane's queries: g and g + 8 of the warp's 16
  std::int64_t first[2];    // the first key each of them sees
  std::int64_t warp_first;  // the smallest of the warp's: document starts only grow
  std::int64_t warp_last;   // the warp's last query inside the sequence (if any)
  std::int64_t warp_last_first;         // and the first key it sees: the largest of the warp's
  std::int64_t first_tile, last_query;  // the key tiles walked: first_tile..last_query
  float slope_log2;                     // ALiBi's slope, scores in base 2
  std::uint16_t* kv;

  // Later query tiles see more keys: they are scheduled first (block_tile).
  __device__ QueryTile(const AttnShape& s, std::int64_t q_tiles, std::uint16_t* kv_buffers,
                       std::int64_t order_group)
      : L(s), T(s.seq), kv(kv_buffers) {
    const BlockTile bt = block_tile(s.batch * s.heads, q_tiles, order_group);
    const std::int64_t bh = bt.unit, qt = q_tiles - 1 - bt.rank;
    b = bh / s.heads;
    h = bh % s.heads;
    kvh = h / L.group;
    q0 = qt * kRows;
    warp_row = q0 + static_cast<std::int64_t>(threadIdx.x / 32) * 16;
    row[0] = warp_row + static_cast<int>(threadIdx.x % 32) / 4;
    row[1] = row[0] + 8;
    first[0] = first_key_or_zero(s, b, row[0]);
    first[1] = first_key_or_zero(s, b, row[1]);
    warp_first = first_key_or_zero(s, b, warp_row);
    warp_last = smaller(warp_row + 15, T - 1);
    warp_last_first = first_key_or_zero(s, b, warp_last);
    first_tile = attn::first_key(s, b, q0) / kRows * kRows;
    last_query = smaller(T, q0 + kRows) - 1;
    slope_log2 = static_cast<float>(attn::head_slope(s, h)) * kLog2e;
  }
  // Whether every row of the warp sees every key of tile k0 (the last key is at most the
  // first row, and no row's document starts after the first key): no mask to apply. Uniform
  // across the warp.
  __device__ bool full(std::int64_t k0) const {
    return k0 + kRows - 1 <= warp_row && warp_last_first <= k0;
  }
  // The 16-key blocks of tile k0 that some row of the warp sees (all four unless skip).
  __device__ Blocks key_blocks(std::int64_t k0, bool skip) const {
    if (!skip) return {0, 3};
    const std::int64_t lo = (warp_first - k0) / kBlock, hi = (warp_last - k0) / kBlock;
    return {lo > 0 ? static_cast<int>(lo) : 0, hi < 3 ? static_cast<int>(hi) : 3};
  }
  // This lane's rows against key tile k0 (rows past the end see nothing).
  __device__ Limits limits(std::int64_t k0) const {
    Limits l;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l.lo[r] = static_cast<int>(first[r] - k0);
      l.rel[r] = static_cast<int>(row[r] - k0);
      l.hi[r] = row[r] < T ? l.rel[r] : -1;
    }
    return l;
  }
  __device__ std::uint16_t* keys(int buf) const { return kv + buf * 2 * kRows * row_stride(HD); }
  __device__ std::uint16_t* values(int buf) const { return keys(buf) + kRows * row_stride(HD); }

  // Starts the copies of key tile k0 into buffer buf (the caller commits them).
  __device__ void fetch(const Ref& qkv, int buf, std::int64_t k0) const {
    load_tile<E, HD>(
        keys(buf), qkv, [&](std::int64_t t) { return L.k(b, kvh, t); }, k0, T);
    load_tile<E, HD>(
        values(buf), qkv, [&](std::int64_t t) { return L.v(b, kvh, t); }, k0, T);
  }
  // Whether any of the warp's rows sees a key of tile k0: uniform across the warp, as the
  // collective products need.
  __device__ bool warp_sees(std::int64_t k0) const {
    return warp_row < T && k0 <= warp_row + 15 && k0 + kRows > warp_first;
  }
  // body(k0, buf) for every key tile, its K and V in buffer buf and visible to the block. The
  // first tile must have been fetched into buffer 0 and committed (with whatever else the
  // kernel needs first: that group is complete when body first runs).
  template <class Body>
  __device__ void walk(const Ref& qkv, Body body) const {
    int buf = 0;
    for (std::int64_t k0 = first_tile; k0 <= last_query; k0 += kRows, buf ^= 1) {
      if (k0 + kRows <= last_query) fetch(qkv, buf ^ 1, k0 + kRows);
      async_commit();
      async_wait<1>();  // all but the copies just issued
      __syncthreads();
      body(k0, buf);
      __syncthreads();  // this buffer is refilled two tiles on
    }
  }
};

}  // namespace kintsugi::cuda::attn_tc
