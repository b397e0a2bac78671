#pragma once
// Pieces shared by the attention kernels: addressing into the packed qkv activation
// [B, T, kv_heads, group + 2, hd] (see AttentionShape in backend.hpp), ALiBi slopes, tile sizes
// and tile loads into shared memory.
//
// Tiles live in shared memory as Acc (f32, or f64 for f64 tensors) with rows padded to hd + 1
// elements: a lane that reads "its" row at dimension d then hits a different bank from its
// neighbours, and lanes reading consecutive dimensions of one row do too.
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda::attn {

constexpr int kTile = 32;         // query rows and key rows per tile (one per lane)
constexpr int kMaxHeadDim = 256;  // dimensions per lane: up to 8

struct QkvIndex {
  std::int64_t group, row_stride, hd, seq, heads;
  __host__ __device__ explicit QkvIndex(const AttnShape& s)
      : group(s.heads / s.kv_heads),
        row_stride(s.kv_heads * (s.heads / s.kv_heads + 2) * s.head_dim),
        hd(s.head_dim),
        seq(s.seq),
        heads(s.heads) {}
  // First element of query head h / key / value of kv head kvh, at token t of sequence b.
  __device__ std::int64_t q(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return (b * seq + t) * row_stride + ((h / group) * (group + 2) + h % group) * hd;
  }
  __device__ std::int64_t k(std::int64_t b, std::int64_t kvh, std::int64_t t) const {
    return (b * seq + t) * row_stride + (kvh * (group + 2) + group) * hd;
  }
  __device__ std::int64_t v(std::int64_t b, std::int64_t kvh, std::int64_t t) const {
    return k(b, kvh, t) + hd;
  }
  // out and dout [B, T, H, hd]; lse and delta [B, H, T].
  __device__ std::int64_t o(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return ((b * seq + t) * heads + h) * hd;
  }
  __device__ std::int64_t row(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return (b * heads + h) * seq + t;
  }
};

// The first key query t of sequence b may see: its document's first row with document
// attention, else 0; with a sliding window no earlier than t - window + 1. Never decreasing in
// t (document starts do not, nor does t - window + 1), which the kernels' tile skipping takes.
__device__ inline std::int64_t first_key(const AttnShape& s, std::int64_t b, std::int64_t t) {
  const std::int64_t doc = s.doc_start ? s.doc_start[b * s.seq + t] : 0;
  return s.window > 0 && t - s.window + 1 > doc ? t - s.window + 1 : doc;
}

// The first key tile (a multiple of `tile`) that a query tile from q0 may see whatever the
// documents: 0, or with a sliding window the tile holding key q0 - window + 1.
__host__ __device__ inline std::int64_t first_window_tile(const AttnShape& s, std::int64_t q0,
                                                          std::int64_t tile) {
  if (s.window <= 0 || q0 - s.window + 1 <= 0) return 0;
  return (q0 - s.window + 1) / tile * tile;
}

// One past the last query that key tile k0..k0 + tile - 1 may be seen by: seq, or with a
// sliding window the last key's window end (k0 + tile - 1 + window).
__host__ __device__ inline std::int64_t window_query_end(const AttnShape& s, std::int64_t k0,
                                                         std::int64_t tile) {
  if (s.window <= 0) return s.seq;
  const std::int64_t end = k0 + tile - 1 + s.window;
  return end < s.seq ? end : s.seq;
}

// ALiBi's slope of local head h (0 without ALiBi): backend/alibi.hpp's formula, in f64.
__device__ inline double head_slope(const AttnShape& s, std::int64_t h) {
  if (s.alibi_heads <= 0) return 0.0;
  const std::int64_t head = s.head_begin + h;
  std::int64_t pow2 = 1;
  while (pow2 * 2 <= s.alibi_heads) pow2 *= 2;
  const double p = static_cast<double>(pow2);
  if (head < pow2) return exp2(-8.0 * static_cast<double>(head + 1) / p);
  const double j = static_cast<double>(head - pow2);
  return exp2(-8.0 * (2.0 * j + 1.0) / (2.0 * p));
}

// tile[r * (hd + 1) + d] = src[first(t0 + r) + d] for the kTile rows from t0, 0 past the end.
template <class Acc, class First>
__device__ void load_tile(Acc* tile, const Ref& src, First first, std::int64_t t0, std::int64_t seq,
                          std::int64_t hd) {
  const std::int64_t ld = hd + 1;
  for (std::int64_t idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const std::int64_t r = idx / hd, d = idx % hd, t = t0 + r;
    tile[r * ld + d] = t < seq ? load<Acc>(src, first(t) + d) : Acc(0);
  }
}

// The key and value tiles of kv head kvh of sequence b, keys from k0.
template <class Acc>
__device__ void load_kv_tiles(Acc* k_tile, Acc* v_tile, const Ref& qkv, const QkvIndex& L,
                              std::int64_t b, std::int64_t kvh, std::int64_t k0) {
  load_tile(
      k_tile, qkv, [&](std::int64_t t) { return L.k(b, kvh, t); }, k0, L.seq, L.hd);
  load_tile(
      v_tile, qkv, [&](std::int64_t t) { return L.v(b, kvh, t); }, k0, L.seq, L.hd);
}

// The (sequence, head, query tile) of a block of the CUDA-core kernels that walk key tiles for a
// tile of kTile queries (forward, dQ): blocks run over batch x heads x q_tiles, later query
// tiles (they see more keys) scheduled first.
struct QueryTileBlock {
  std::int64_t b, h, kvh, q0;
  __device__ QueryTileBlock(const AttnShape& s, const QkvIndex& L, std::int64_t q_tiles) {
    const std::int64_t bh = blockIdx.x / q_tiles, qt = q_tiles - 1 - blockIdx.x % q_tiles;
    b = bh / s.heads;
    h = bh % s.heads;
    kvh = h / L.group;
    q0 = qt * kTile;
  }
};

// dot of two padded tile rows over hd dimensions.
template <class Acc>
__device__ __forceinline__ Acc dot_rows(const Acc* a, const Acc* b, std::int64_t hd) {
  Acc acc = 0;
  for (std::int64_t d = 0; d < hd; ++d) acc += a[d] * b[d];
  return acc;
}

// acc += w_jj * tile row jj for the first `count` rows of a tile, in row order, on this lane's
// dimensions d = lane + 32 dd, where lane jj holds w_jj in `weight`: forward's O += P V and
// backward's dQ += dS K. Every lane reads every weight, so they pass through the warp's row of
// shared memory `weights`.
template <int DL, class Acc>
__device__ __forceinline__ void add_weighted_rows(Acc (&acc)[DL], Acc* weights, Acc weight,
                                                  int count, const Acc* tile, std::int64_t ld,
                                                  std::int64_t hd, int lane) {
  weights[lane] = weight;
  __syncwarp();
  for (int jj = 0; jj < count; ++jj) {
    const Acc w = weights[jj];
#pragma unroll
    for (int dd = 0; dd < DL; ++dd) {
      const std::int64_t d = lane + 32 * dd;
      if (d < hd) acc[dd] += w * tile[jj * ld + d];
    }
  }
  __syncwarp();  // read before the warp's next row overwrites them
}

// out[at + d] = row[dd] * factor on this lane's dimensions d = lane + 32 dd (a finished row of
// O, dQ, dK or dV).
template <int DL, class Acc>
__device__ __forceinline__ void store_lane_dims(const Ref& out, std::int64_t at,
                                                const Acc (&row)[DL], Acc factor,
                                                std::int64_t hd, int lane) {
#pragma unroll
  for (int dd = 0; dd < DL; ++dd) {
    const std::int64_t d = lane + 32 * dd;
    if (d < hd) store(out, at + d, row[dd] * factor);
  }
}

// Dimensions per lane for a head size: 1, 2, 4 or 8 (hd <= 32, 64, 128, 256).
inline int dims_per_lane(std::int64_t hd) {
  return hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
}

}  // namespace kintsugi::cuda::attn
