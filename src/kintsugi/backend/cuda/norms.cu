// LayerNorm and RMSNorm over the last dimension. Forward: one warp per row, the row's
// statistics by warp reductions (two passes over the row for LayerNorm, like the CPU kernel).
// Backward: one warp per row for dx (accumulated into dx, which holds the residual stream's
// gradient), then the parameter gradients as deterministic column reductions (reductions.cuh).
// A warp per row, not a block: rows of a few thousand elements are too short to repay a block's
// barriers. Rows whose length is a multiple of 8 move in runs of 8 elements (walk, load8).
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

template <class Acc>
__global__ void layernorm_forward_kernel(Ref x, Ref w, Ref b, Ref y, Ref mean, Ref rstd,
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

// dx += rs (dn - mean(dn) - n mean(dn n)) with n = (x - mu) rs and dn = dy w.
template <class Acc>
__global__ void layernorm_dx_kernel(Ref dy, Ref x, Ref w, Ref mean, Ref rstd, Ref dx,
                                    std::int64_t rows, std::int64_t cols, bool vec) {
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

template <class Acc>
struct LayerNormParamTerms {  // dw += dy (x - mu) rs, db += dy
  Ref dy, x, mean, rstd;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    const Acc d = load<Acc>(dy, r * cols + c);
    acc[0] += d * (load<Acc>(x, r * cols + c) - load<Acc>(mean, r)) * load<Acc>(rstd, r);
    acc[1] += d;
  }
};

template <class Acc>
__global__ void rmsnorm_forward_kernel(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows,
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

// dx += rs (dn - n mean(dn n)) with n = x rs and dn = dy w.
template <class Acc>
__global__ void rmsnorm_dx_kernel(Ref dy, Ref x, Ref w, Ref rstd, Ref dx, std::int64_t rows,
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

template <class Acc>
struct RmsNormParamTerms {  // dw += dy x rs
  Ref dy, x, rstd;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    acc[0] += load<Acc>(dy, r * cols + c) * load<Acc>(x, r * cols + c) * load<Acc>(rstd, r);
  }
};

template <class Acc>
void layernorm_forward_t(Ref x, Ref w, Ref b, Ref y, Ref mean, Ref rstd, std::int64_t rows,
                         std::int64_t cols, double eps, cudaStream_t stream) {
  KINTSUGI_CUDA_LAUNCH(layernorm_forward_kernel<Acc>, row_blocks(rows), kThreads, 0, stream, x, w,
                       b, y, mean, rstd, rows, cols, static_cast<Acc>(eps),
                       cols % 8 == 0 && aligned16({x, w, b, y}));
  check_launch("layernorm_forward_kernel", stream);
}

template <class Acc>
void layernorm_backward_t(Ref dy, Ref x, Ref w, Ref mean, Ref rstd, Ref dx, Ref dw, Ref db,
                          std::int64_t rows, std::int64_t cols, bool accumulate, Scratch scratch,
                          cudaStream_t stream) {
  if (rows > 0) {
    KINTSUGI_CUDA_LAUNCH(layernorm_dx_kernel<Acc>, row_blocks(rows), kThreads, 0, stream, dy, x, w,
                         mean, rstd, dx, rows, cols, cols % 8 == 0 && aligned16({dy, x, w, dx}));
    check_launch("layernorm_dx_kernel", stream);
  }
  column_reduce<Acc, 2>(LayerNormParamTerms<Acc>{dy, x, mean, rstd, cols}, rows, cols, dw, db,
                        accumulate, scratch.data, stream);
}

template <class Acc>
void rmsnorm_forward_t(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t cols,
                       double eps, cudaStream_t stream) {
  KINTSUGI_CUDA_LAUNCH(rmsnorm_forward_kernel<Acc>, row_blocks(rows), kThreads, 0, stream, x, w, y,
                       rstd, rows, cols, static_cast<Acc>(eps),
                       cols % 8 == 0 && aligned16({x, w, y}));
  check_launch("rmsnorm_forward_kernel", stream);
}

template <class Acc>
void rmsnorm_backward_t(Ref dy, Ref x, Ref w, Ref rstd, Ref dx, Ref dw, std::int64_t rows,
                        std::int64_t cols, bool accumulate, Scratch scratch, cudaStream_t stream) {
  if (rows > 0) {
    KINTSUGI_CUDA_LAUNCH(rmsnorm_dx_kernel<Acc>, row_blocks(rows), kThreads, 0, stream, dy, x, w,
                         rstd, dx, rows, cols, cols % 8 == 0 && aligned16({dy, x, w, dx}));
    check_launch("rmsnorm_dx_kernel", stream);
  }
  column_reduce<Acc, 1>(RmsNormParamTerms<Acc>{dy, x, rstd, cols}, rows, cols, dw, Ref{},
                        accumulate, scratch.data, stream);
}

}  // namespace

void layernorm_forward(Ref x, Ref w, Ref b, Ref y, Ref mean, Ref rstd, std::int64_t rows,
                       std::int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (all_f64({x, w, b, y, mean, rstd}))
    layernorm_forward_t<double>(x, w, b, y, mean, rstd, rows, cols, eps, stream);
  else
    layernorm_forward_t<float>(x, w, b, y, mean, rstd, rows, cols, eps, stream);
}

std::size_t norm_backward_scratch_bytes(std::int64_t rows, std::int64_t cols) {
  return column_partial_bytes<double>(2, rows, cols);
}

void layernorm_backward(Ref dy, Ref x, Ref w, Ref mean, Ref rstd, Ref dx, Ref dw, Ref db,
                        std::int64_t rows, std::int64_t cols, bool accumulate, Scratch scratch,
                        cudaStream_t stream) {
  if (cols <= 0) return;
  if (all_f64({dy, x, w, mean, rstd, dx, dw, db}))
    layernorm_backward_t<double>(dy, x, w, mean, rstd, dx, dw, db, rows, cols, accumulate, scratch,
                                 stream);
  else
    layernorm_backward_t<float>(dy, x, w, mean, rstd, dx, dw, db, rows, cols, accumulate, scratch,
                                stream);
}

void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t cols,
                     double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (all_f64({x, w, y, rstd}))
    rmsnorm_forward_t<double>(x, w, y, rstd, rows, cols, eps, stream);
  else
    rmsnorm_forward_t<float>(x, w, y, rstd, rows, cols, eps, stream);
}

void rmsnorm_backward(Ref dy, Ref x, Ref w, Ref rstd, Ref dx, Ref dw, std::int64_t rows,
                      std::int64_t cols, bool accumulate, Scratch scratch, cudaStream_t stream) {
  if (cols <= 0) return;
  if (all_f64({dy, x, w, rstd, dx, dw}))
    rmsnorm_backward_t<double>(dy, x, w, rstd, dx, dw, rows, cols, accumulate, scratch, stream);
  else
    rmsnorm_backward_t<float>(dy, x, w, rstd, dx, dw, rows, cols, accumulate, scratch, stream);
}

}  // namespace kintsugi::cuda
