#pragma once
// Deterministic reductions in two stages: a fixed partition of the input (a function of the
// shape only, never of the GPU) reduced block by block into partial sums, then the partials
// summed in their order by one block. No atomics: the same inputs give the same bits.
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

// ---- column sums: out_v[c] (+)= sum over rows of term_v(r, c) for NV terms at once (layernorm's
// dw and db, RMSNorm's dw, a bias gradient).
constexpr std::int64_t kRowsPerChunk = 64;
constexpr std::int64_t kMaxChunks = 1024;

inline std::int64_t column_chunks(std::int64_t rows) {
  const std::int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}

// Bytes of Acc partials for NV terms.
template <class Acc>
std::size_t column_partial_bytes(int terms, std::int64_t rows, std::int64_t cols) {
  return sizeof(Acc) * static_cast<std::size_t>(terms * column_chunks(rows) * cols);
}

// Stage 1: block (x: 256 columns, y: chunk of rows); partial[(v * chunks + chunk) * cols + c].
// One column per thread: a thread per run of 8 columns (load8) has 8 times fewer threads in
// flight, and measured slower on an H200 (bias gradients of GPT-2 124M: 21.2 against 19.5 ms of
// linear_backward_weight per step).
// Terms is a functor: terms(r, c, acc) adds row r's terms for column c into acc[0..NV).
template <class Acc, int NV, class Terms>
__global__ void column_partials_kernel(Terms terms, std::int64_t rows, std::int64_t cols,
                                       Acc* partial) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t chunks = gridDim.y, chunk = blockIdx.y;
  if (c >= cols) return;
  const std::int64_t per = (rows + chunks - 1) / chunks;
  const std::int64_t r0 = chunk * per, r1 = r0 + per < rows ? r0 + per : rows;
  Acc acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = Acc(0);
  for (std::int64_t r = r0; r < r1; ++r) terms(r, c, acc);
  for (int v = 0; v < NV; ++v) partial[(v * chunks + chunk) * cols + c] = acc[v];
}

// Stage 2: out_v[c] = (accumulate ? out_v[c] : 0) + the sum of the chunks' partials. A block
// takes 32 columns of one term: warp w sums chunks w, w + 32, ... in order (lane = column), then
// one warp adds the 32 warp sums in warp order. The order is fixed by the shape alone. Spread
// over 32 warps, not one thread per column summing hundreds of chunks in a dependent chain: on
// an H200 that change took GPT-2 124M's LayerNorm backward from 12.4 to 11.2 ms per step.
constexpr int kFinishWarps = 32;
template <class Acc, class R>
__global__ void column_finish_kernel(const Acc* partial, std::int64_t chunks, std::int64_t cols,
                                     R out0, R out1, bool accumulate) {
  __shared__ Acc sums[kFinishWarps][33];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, v = blockIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + lane;
  Acc acc = 0;
  if (c < cols)
    for (std::int64_t k = warp; k < chunks; k += kFinishWarps)
      acc += partial[(v * chunks + k) * cols + c];
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || c >= cols) return;
  const R out = v == 0 ? out0 : out1;  // a copy: a reference put both on the stack (48 bytes)
  Acc total = accumulate ? load<Acc>(out, c) : Acc(0);
  for (int w = 0; w < kFinishWarps; ++w) total += sums[w][lane];
  store(out, c, total);
}

// Stage 2 alone, for kernels that write the partials themselves (norms.cu): NV terms of `chunks`
// partials each; out0, out1 Refs or Typed (out1 unused when NV is 1).
template <class Acc, int NV, class R>
void column_finish(const Acc* partial, std::int64_t chunks, std::int64_t cols, R out0, R out1,
                   bool accumulate, cudaStream_t stream) {
  auto* finish = column_finish_kernel<Acc, R>;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(NV));
  KINTSUGI_CUDA_LAUNCH(finish, grid, kFinishWarps * 32, 0, stream, partial, chunks, cols, out0,
                       out1, accumulate);
  check_launch("column_finish_kernel", stream);
}

// Runs both stages; `partial` holds column_partial_bytes<Acc>(NV, rows, cols).
template <class Acc, int NV, class Terms, class R>
void column_reduce(const Terms& terms, std::int64_t rows, std::int64_t cols, R out0, R out1,
                   bool accumulate, void* partial, cudaStream_t stream) {
  if (cols <= 0) return;
  const std::int64_t chunks = column_chunks(rows);
  auto* p = static_cast<Acc*>(partial);
  if (rows > 0) {
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    auto* partials = column_partials_kernel<Acc, NV, Terms>;
    KINTSUGI_CUDA_LAUNCH(partials, grid, kThreads, 0, stream, terms, rows, cols, p);
    check_launch("column_partials_kernel", stream);
  } else {
    check(cudaMemsetAsync(p, 0, column_partial_bytes<Acc>(NV, rows, cols), stream),
          "cudaMemsetAsync (column partials)");
  }
  column_finish<Acc, NV>(p, chunks, cols, out0, out1, accumulate, stream);
}

// ---- sums into one f64: *total += sum of values[0..n) (the second stage of sum_squares, and
// the loss sum of cross_entropy_finish). One block of 1024 threads; thread t sums t, t + 1024,
// ... in order, then the block's fixed tree.
void sum_doubles(const double* values, std::int64_t n, double* total, cudaStream_t stream);

}  // namespace kintsugi::cuda
