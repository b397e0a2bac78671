// LayerNorm and RMSNorm over the last dimension. Forward: one warp per row, the row's
// statistics by warp reductions (two passes over the row for LayerNorm, like the CPU kernel).
// Backward, one kernel (norm_backward_kernel): a block per chunk of rows of the column sums'
// fixed partition (reductions.cuh), one warp per row, dx accumulated into dx (which holds the
// residual stream's gradient) and the row's weight (and bias) gradient terms summed into the
// warp's own accumulators in shared memory; the block then sums its warps' accumulators in warp
// order into the chunk's partials, which column_finish sums in chunk order. So dy and x are read
// from memory once per pass over a row, not again by a separate column reduction.
// A warp per row, not a block: rows of a few thousand elements are too short to repay a block's
// barriers. Rows whose length is a multiple of 8 move in runs of 8 elements (walk, load8).
//
// Every kernel is a template over its accessors (device_math.cuh): Typed<T> for the element
// types of UniformTypes/NormTypes, chosen on the host (run_typed), Ref for any other mix.
// KINTSUGI_TYPED_KERNELS=0 (typed_kernels.hpp) runs the kernels as they were before: Ref
// accessors, dx by layernorm_dx_kernel and the parameter gradients by column_reduce.
#include "kintsugi/backend/cuda/reductions.cuh"

namespace kintsugi::cuda {

namespace {

// Rows per block of kThreads threads: one per warp.
constexpr int kRowsPerBlock = kThreads / 32;
__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
}
inline unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

template <class Acc, class XR, class SR>
__global__ void layernorm_forward_kernel(XR x, XR w, XR b, XR y, SR mean, SR rstd,
                                         std::int64_t rows, std::int64_t cols, Acc eps, bool vec) {
  const std::int64_t r = warp_row(), base = r * cols;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  Acc sum = 0, var = 0;
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc v[run.size];
    load_run(x, base + c, v);
    for (int e = 0; e < run.size; ++e) sum += v[e];
  });
  const Acc mu = warp_sum(sum) / static_cast<Acc>(cols);
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc v[run.size];
    load_run(x, base + c, v);
    for (int e = 0; e < run.size; ++e) var += (v[e] - mu) * (v[e] - mu);
  });
  const Acc rs = Acc(1) / sqrt_acc(warp_sum(var) / static_cast<Acc>(cols) + eps);
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc v[run.size], wv[run.size], bv[run.size];
    load_run(x, base + c, v);
    load_run(w, c, wv);
    load_run(b, c, bv);
    for (int e = 0; e < run.size; ++e) v[e] = (v[e] - mu) * rs * wv[e] + bv[e];
    store_run(y, base + c, v);
  });
  if (lane == 0) {
    store(mean, r, mu);
    store(rstd, r, rs);
  }
}

template <class Acc, class XR, class SR>
__global__ void rmsnorm_forward_kernel(XR x, XR w, XR y, SR rstd, std::int64_t rows,
                                       std::int64_t cols, Acc eps, bool vec) {
  const std::int64_t r = warp_row(), base = r * cols;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  Acc sq = 0;
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc v[run.size];
    load_run(x, base + c, v);
    for (int e = 0; e < run.size; ++e) sq += v[e] * v[e];
  });
  const Acc rs = Acc(1) / sqrt_acc(warp_sum(sq) / static_cast<Acc>(cols) + eps);
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc v[run.size], wv[run.size];
    load_run(x, base + c, v);
    load_run(w, c, wv);
    for (int e = 0; e < run.size; ++e) v[e] = v[e] * rs * wv[e];
    store_run(y, base + c, v);
  });
  if (lane == 0) store(rstd, r, rs);
}

// ---- backward in two kernels (KINTSUGI_TYPED_KERNELS=0, and rows too long for the fused
// kernel's shared memory): dx by one warp per row, then the parameter gradients by column_reduce.

// LayerNorm: dx += rs (dn - mean(dn) - n mean(dn n)) with n = (x - mu) rs and dn = dy w.
template <class Acc, class XR, class SR>
__global__ void layernorm_dx_kernel(XR dy, XR x, XR w, SR mean, SR rstd, XR dx, std::int64_t rows,
                                    std::int64_t cols, bool vec) {
  const std::int64_t r = warp_row(), base = r * cols;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const Acc mu = load<Acc>(mean, r), rs = load<Acc>(rstd, r);
  Acc sum_dn = 0, sum_dn_n = 0;
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc d[run.size], xv[run.size], wv[run.size];
    load_run(dy, base + c, d);
    load_run(x, base + c, xv);
    load_run(w, c, wv);
    for (int e = 0; e < run.size; ++e) {
      const Acc dn = d[e] * wv[e];
      sum_dn += dn;
      sum_dn_n += dn * (xv[e] - mu) * rs;
    }
  });
  const Acc mean_dn = warp_sum(sum_dn) / static_cast<Acc>(cols);
  const Acc mean_dn_n = warp_sum(sum_dn_n) / static_cast<Acc>(cols);
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc d[run.size], xv[run.size], wv[run.size], g[run.size];
    load_run(dy, base + c, d);
    load_run(x, base + c, xv);
    load_run(w, c, wv);
    load_run(dx, base + c, g);
    for (int e = 0; e < run.size; ++e)
      g[e] += rs * (d[e] * wv[e] - mean_dn - (xv[e] - mu) * rs * mean_dn_n);
    store_run(dx, base + c, g);
  });
}

template <class Acc, class XR, class SR>
struct LayerNormParamTerms {  // dw += dy (x - mu) rs, db += dy
  XR dy, x;
  SR mean, rstd;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    const Acc d = load<Acc>(dy, r * cols + c);
    acc[0] += d * (load<Acc>(x, r * cols + c) - load<Acc>(mean, r)) * load<Acc>(rstd, r);
    acc[1] += d;
  }
};

// RMSNorm: dx += rs (dn - n mean(dn n)) with n = x rs and dn = dy w.
template <class Acc, class XR, class SR>
__global__ void rmsnorm_dx_kernel(XR dy, XR x, XR w, SR rstd, XR dx, std::int64_t rows,
                                  std::int64_t cols, bool vec) {
  const std::int64_t r = warp_row(), base = r * cols;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const Acc rs = load<Acc>(rstd, r);
  Acc sum_dn_n = 0;
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc d[run.size], xv[run.size], wv[run.size];
    load_run(dy, base + c, d);
    load_run(x, base + c, xv);
    load_run(w, c, wv);
    for (int e = 0; e < run.size; ++e) sum_dn_n += d[e] * wv[e] * xv[e] * rs;
  });
  const Acc mean_dn_n = warp_sum(sum_dn_n) / static_cast<Acc>(cols);
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    Acc d[run.size], xv[run.size], wv[run.size], g[run.size];
    load_run(dy, base + c, d);
    load_run(x, base + c, xv);
    load_run(w, c, wv);
    load_run(dx, base + c, g);
    for (int e = 0; e < run.size; ++e) g[e] += rs * (d[e] * wv[e] - xv[e] * rs * mean_dn_n);
    store_run(dx, base + c, g);
  });
}

template <class Acc, class XR, class SR>
struct RmsNormParamTerms {  // dw += dy x rs
  XR dy, x;
  SR rstd;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    acc[0] += load<Acc>(dy, r * cols + c) * load<Acc>(x, r * cols + c) * load<Acc>(rstd, r);
  }
};

// ---- backward in one kernel.

// Where column c sits in a warp's accumulators: the runs of 8 columns (below `whole`) have their
// two halves swapped for every other group of 4 lanes. A lane's run is 32 bytes after its
// neighbour's, so lanes l and l + 4, which share a phase of a 16-byte shared-memory access, would
// hit the same banks; swapped, the 8 lanes of a phase cover all 32 banks once.
__device__ __forceinline__ std::int64_t slot(std::int64_t c, std::int64_t whole) {
  return c < whole ? c ^ (((c >> 5) & 1) << 2) : c;
}

// acc[0..4) += t[at..at + 4): one 16-byte read and write for f32.
template <class Acc>
__device__ __forceinline__ void add4(Acc* acc, const Acc (&t)[8], int at) {
  if constexpr (std::is_same_v<Acc, float>) {
    float a[4];
    const uint4 bits = load16(acc);
    std::memcpy(a, &bits, sizeof a);
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] += t[at + e];
    uint4 out;
    std::memcpy(&out, a, sizeof a);
    store16(acc, out);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] += t[at + e];
  }
}
// The terms of columns c..c + K - 1 into a warp's accumulators of one term (slot()).
template <int K, class Acc>
__device__ __forceinline__ void accumulate(Acc* acc, std::int64_t c, std::int64_t whole,
                                           const Acc (&t)[K]) {
  if constexpr (K == 8) {
    add4(acc + slot(c, whole), t, 0);
    add4(acc + slot(c + 4, whole), t, 4);
  } else {
    acc[c] += t[0];  // the tail: c >= whole
  }
}

// Block = one chunk of rows (chunk = blockIdx.x of column_chunks(rows), rows split as
// column_partials_kernel splits them); warp w takes the chunk's rows w, w + warps, ... in order.
// Dynamic shared memory: warps x NV x cols Acc accumulators. partial[(v * chunks + chunk) *
// cols + c] = the chunk's sum of term v of column c: its warps' sums, in warp order.
template <class Acc, bool kLayerNorm, class XR, class SR>
__global__ void norm_backward_kernel(XR dy, XR x, XR w, SR mean, SR rstd, XR dx, std::int64_t rows,
                                     std::int64_t cols, bool vec, Acc* partial) {
  constexpr int NV = kLayerNorm ? 2 : 1;
  Acc* const shared = dynamic_shared<Acc>();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const std::int64_t chunks = gridDim.x, chunk = blockIdx.x;
  const std::int64_t whole = vec ? cols / 8 * 8 : 0;
  Acc* const acc = shared + static_cast<std::int64_t>(warp) * NV * cols;  // [NV][cols]
  // A lane zeroes and updates only its own columns' slots, so the warp needs no barrier before
  // the block's.
  walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
    for (int e = 0; e < run.size; ++e)
      for (int v = 0; v < NV; ++v) acc[v * cols + slot(c + e, whole)] = Acc(0);
  });
  const std::int64_t per = (rows + chunks - 1) / chunks, r0 = chunk * per;
  const std::int64_t r1 = smaller(r0 + per, rows);
  for (std::int64_t r = r0 + warp; r < r1; r += warps) {
    const std::int64_t base = r * cols;
    const Acc mu = kLayerNorm ? load<Acc>(mean, r) : Acc(0), rs = load<Acc>(rstd, r);
    Acc sum_dn = 0, sum_dn_n = 0;
    walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
      Acc d[run.size], xv[run.size], wv[run.size];
      load_run(dy, base + c, d);
      load_run(x, base + c, xv);
      load_run(w, c, wv);
      for (int e = 0; e < run.size; ++e) {
        const Acc dn = d[e] * wv[e];
        sum_dn += dn;
        sum_dn_n += dn * ((xv[e] - mu) * rs);
      }
    });
    const Acc mean_dn = kLayerNorm ? warp_sum(sum_dn) / static_cast<Acc>(cols) : Acc(0);
    const Acc mean_dn_n = warp_sum(sum_dn_n) / static_cast<Acc>(cols);
    walk(vec, cols, lane, 32, [&](auto run, std::int64_t c) {
      Acc d[run.size], xv[run.size], wv[run.size], g[run.size], dw[run.size];
      load_run(dy, base + c, d);
      load_run(x, base + c, xv);
      load_run(w, c, wv);
      load_run(dx, base + c, g);
      for (int e = 0; e < run.size; ++e) {
        const Acc n = (xv[e] - mu) * rs;
        g[e] += rs * (d[e] * wv[e] - mean_dn - n * mean_dn_n);
        dw[e] = d[e] * n;
      }
      store_run(dx, base + c, g);
      accumulate(acc, c, whole, dw);
      if constexpr (kLayerNorm) accumulate(acc + cols, c, whole, d);  // db += dy
    });
  }
  __syncthreads();
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    for (int v = 0; v < NV; ++v) {
      Acc sum = 0;
      for (int k = 0; k < warps; ++k) sum += shared[(k * NV + v) * cols + slot(c, whole)];
      partial[(v * chunks + chunk) * cols + c] = sum;
    }
}

// Shared memory the fused kernel may take per block: 8 warps of LayerNorm accumulators for rows
// up to 1600 columns (GPT-2 1.5B) in f32, 4 warps up to 3200; longer rows take the two kernels.
// GPT-2 124M's 768 columns take 8 x 2 x 768 x 4 = 48 KiB, four blocks (32 warps) per SM.
constexpr std::size_t kFusedSharedMax = 100 * 1024;
constexpr std::size_t kDefaultShared = 48 * 1024;  // more needs cudaFuncSetAttribute

// Chunks (blocks) of the fused kernel: column_chunks' 64 rows each, but at least 512 chunks as
// long as each keeps 8 rows (one per warp), so that GPT-2 1.5B's 8 x 1024 rows still spread over
// an H200's 132 SMs (128 chunks would leave one block of 8 warps per SM). A function of the
// shape only, as the column sums' partition must be.
inline std::int64_t fused_chunks(std::int64_t rows) {
  constexpr std::int64_t kMinChunks = 512, kMinRowsPerChunk = 8;
  const std::int64_t spread = (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  const std::int64_t chunks = column_chunks(rows), floor = smaller(spread, kMinChunks);
  return chunks > floor ? chunks : floor;
}

// Warps per block of the fused kernel for rows of `cols`, or 0 when the two kernels should run.
template <class Acc>
int fused_warps(int terms, std::int64_t cols) {
  const std::size_t per_warp = sizeof(Acc) * static_cast<std::size_t>(terms * cols);
  for (int warps : {8, 4})
    if (warps * per_warp <= kFusedSharedMax) return warps;
  return 0;
}

// Backward of either norm (mean and db unused for RMSNorm): fused when `fuse` and the rows fit,
// else the two kernels. Typed, the fused kernel takes 56 registers (bf16 with f32 statistics;
// ptxas -v, sm_90): with 48 KiB of accumulators for 768 columns, four blocks (32 warps) fit an
// SM. Through Refs it takes 225 and one block per SM: it serves only mixes not compiled typed.
template <class Acc, bool kLayerNorm, class XR, class SR, class GR>
void norm_backward_t(XR dy, XR x, XR w, SR mean, SR rstd, XR dx, GR dw, GR db, std::int64_t rows,
                     std::int64_t cols, bool vec, bool accumulate, bool fuse, Scratch scratch,
                     cudaStream_t stream) {
  constexpr int NV = kLayerNorm ? 2 : 1;
  auto* partial = static_cast<Acc*>(scratch.data);
  const int warps = fuse && rows > 0 ? fused_warps<Acc>(NV, cols) : 0;
  if (warps > 0) {
    const std::int64_t chunks = fused_chunks(rows);
    const std::size_t shared = sizeof(Acc) * static_cast<std::size_t>(warps * NV * cols);
    auto* kernel = norm_backward_kernel<Acc, kLayerNorm, XR, SR>;
    if (shared > kDefaultShared)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(shared)),
            "cudaFuncSetAttribute (norm backward shared memory)");
    KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(chunks), warps * 32, shared, stream, dy, x,
                         w, mean, rstd, dx, rows, cols, vec, partial);
    check_launch("norm_backward_kernel", stream);
    column_finish<Acc, NV>(partial, chunks, cols, dw, db, accumulate, stream);
    return;
  }
  if (rows > 0) {
    if constexpr (kLayerNorm) {
      auto* kernel = layernorm_dx_kernel<Acc, XR, SR>;
      KINTSUGI_CUDA_LAUNCH(kernel, row_blocks(rows), kThreads, 0, stream, dy, x, w, mean, rstd, dx,
                           rows, cols, vec);
      check_launch("layernorm_dx_kernel", stream);
    } else {
      auto* kernel = rmsnorm_dx_kernel<Acc, XR, SR>;
      KINTSUGI_CUDA_LAUNCH(kernel, row_blocks(rows), kThreads, 0, stream, dy, x, w, rstd, dx, rows,
                           cols, vec);
      check_launch("rmsnorm_dx_kernel", stream);
    }
  }
  if constexpr (kLayerNorm)
    column_reduce<Acc, 2>(LayerNormParamTerms<Acc, XR, SR>{dy, x, mean, rstd, cols}, rows, cols,
                          dw, db, accumulate, partial, stream);
  else
    column_reduce<Acc, 1>(RmsNormParamTerms<Acc, XR, SR>{dy, x, rstd, cols}, rows, cols, dw, db,
                          accumulate, partial, stream);
}

// The norms' typed mixes (x, w, b, y, dy and dx; mean and rstd; dw and db): 16-bit or f32
// activations and weights with f32 statistics (LayerContext::statistics, model/layers.hpp) and
// f32 gradients or gradients in the weights' type (train.grad_precision), and the uniform mixes.
using NormTypes =
    Combos<Combo<float, float, float>, Combo<bf16_t, float, float>, Combo<bf16_t, float, bf16_t>,
           Combo<f16_t, float, float>, Combo<f16_t, float, f16_t>, Combo<bf16_t, bf16_t, bf16_t>,
           Combo<f16_t, f16_t, f16_t>, Combo<double, double, double>>;
// The forward's (x, w, b and y; mean and rstd).
using NormForwardTypes =
    Combos<Combo<float, float>, Combo<bf16_t, float>, Combo<f16_t, float>, Combo<bf16_t, bf16_t>,
           Combo<f16_t, f16_t>, Combo<double, double>>;

template <class Acc, class XR, class SR>
void layernorm_forward_t(XR x, XR w, XR b, XR y, SR mean, SR rstd, std::int64_t rows,
                         std::int64_t cols, double eps, bool vec, cudaStream_t stream) {
  auto* kernel = layernorm_forward_kernel<Acc, XR, SR>;
  KINTSUGI_CUDA_LAUNCH(kernel, row_blocks(rows), kThreads, 0, stream, x, w, b, y, mean, rstd, rows,
                       cols, static_cast<Acc>(eps), vec);
  check_launch("layernorm_forward_kernel", stream);
}

template <class Acc, class XR, class SR>
void rmsnorm_forward_t(XR x, XR w, XR y, SR rstd, std::int64_t rows, std::int64_t cols,
                       double eps, bool vec, cudaStream_t stream) {
  auto* kernel = rmsnorm_forward_kernel<Acc, XR, SR>;
  KINTSUGI_CUDA_LAUNCH(kernel, row_blocks(rows), kThreads, 0, stream, x, w, y, rstd, rows, cols,
                       static_cast<Acc>(eps), vec);
  check_launch("rmsnorm_forward_kernel", stream);
}

}  // namespace

void layernorm_forward(Ref x, Ref w, Ref b, Ref y, Ref mean, Ref rstd, std::int64_t rows,
                       std::int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({x, w, b, y});
  if (run_typed(NormForwardTypes{}, {{x, w, b, y}, {mean, rstd}}, [&](auto combo) {
        using X = type_at<0, decltype(combo)>;
        using S = type_at<1, decltype(combo)>;
        layernorm_forward_t<acc_t<X>>(typed<X>(x), typed<X>(w), typed<X>(b), typed<X>(y),
                                      typed<S>(mean), typed<S>(rstd), rows, cols, eps, vec,
                                      stream);
      }))
    return;
  with_acc({x, w, b, y, mean, rstd}, [&](auto acc) {
    layernorm_forward_t<decltype(acc)>(x, w, b, y, mean, rstd, rows, cols, eps, vec, stream);
  });
}

std::size_t norm_backward_scratch_bytes(std::int64_t rows, std::int64_t cols) {
  // fused_chunks(rows) >= column_chunks(rows): room for either kernel's partials.
  return sizeof(double) * static_cast<std::size_t>(2 * fused_chunks(rows) * cols);
}

void layernorm_backward(Ref dy, Ref x, Ref w, Ref mean, Ref rstd, Ref dx, Ref dw, Ref db,
                        std::int64_t rows, std::int64_t cols, bool accumulate, Scratch scratch,
                        cudaStream_t stream) {
  if (cols <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({dy, x, w, dx});
  if (run_typed(NormTypes{}, {{dy, x, w, dx}, {mean, rstd}, {dw, db}}, [&](auto combo) {
        using X = type_at<0, decltype(combo)>;
        using S = type_at<1, decltype(combo)>;
        using G = type_at<2, decltype(combo)>;
        norm_backward_t<acc_t<X>, true>(typed<X>(dy), typed<X>(x), typed<X>(w), typed<S>(mean),
                                        typed<S>(rstd), typed<X>(dx), typed<G>(dw), typed<G>(db),
                                        rows, cols, vec, accumulate, true, scratch, stream);
      }))
    return;
  // Any other mix: the same kernels through Refs, fused unless typed kernels are off.
  const bool fuse = typed_kernels();
  with_acc({dy, x, w, mean, rstd, dx, dw, db}, [&](auto acc) {
    norm_backward_t<decltype(acc), true>(dy, x, w, mean, rstd, dx, dw, db, rows, cols, vec,
                                         accumulate, fuse, scratch, stream);
  });
}

void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t cols,
                     double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({x, w, y});
  if (run_typed(NormForwardTypes{}, {{x, w, y}, {rstd}}, [&](auto combo) {
        using X = type_at<0, decltype(combo)>;
        using S = type_at<1, decltype(combo)>;
        rmsnorm_forward_t<acc_t<X>>(typed<X>(x), typed<X>(w), typed<X>(y), typed<S>(rstd), rows,
                                    cols, eps, vec, stream);
      }))
    return;
  with_acc({x, w, y, rstd}, [&](auto acc) {
    rmsnorm_forward_t<decltype(acc)>(x, w, y, rstd, rows, cols, eps, vec, stream);
  });
}

void rmsnorm_backward(Ref dy, Ref x, Ref w, Ref rstd, Ref dx, Ref dw, std::int64_t rows,
                      std::int64_t cols, bool accumulate, Scratch scratch, cudaStream_t stream) {
  if (cols <= 0) return;
  const bool vec = cols % 8 == 0 && aligned16({dy, x, w, dx});
  if (run_typed(NormTypes{}, {{dy, x, w, dx}, {rstd}, {dw}}, [&](auto combo) {
        using X = type_at<0, decltype(combo)>;
        using S = type_at<1, decltype(combo)>;
        using G = type_at<2, decltype(combo)>;
        norm_backward_t<acc_t<X>, false>(typed<X>(dy), typed<X>(x), typed<X>(w), Typed<S>{},
                                         typed<S>(rstd), typed<X>(dx), typed<G>(dw), Typed<G>{},
                                         rows, cols, vec, accumulate, true, scratch, stream);
      }))
    return;
  const bool fuse = typed_kernels();
  with_acc({dy, x, w, rstd, dx, dw}, [&](auto acc) {
    norm_backward_t<decltype(acc), false>(dy, x, w, Ref{}, rstd, dx, dw, Ref{}, rows, cols, vec,
                                          accumulate, fuse, scratch, stream);
  });
}

}  // namespace kintsugi::cuda
