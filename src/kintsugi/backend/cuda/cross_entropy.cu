// Softmax cross-entropy in the three passes of backend.hpp, one block per row of logits. The
// losses of the rows go to scratch and are summed into the f64 loss sum by one block in a fixed
// order (reductions.cuh), so the loss is deterministic.
//
// Element by element, unlike the other memory-bound kernels: runs of 8 (load8/store8, as in
// elementwise.cu) measured slower here on an H200, 17.8 against 13.5 ms per GPT-2 124M step
// (f32 logits, 512 threads per row); why is not yet understood.
#include "kintsugi/backend/cuda/reductions.cuh"

namespace kintsugi::cuda {

namespace {

template <class Acc>
__global__ void row_max_kernel(Ref logits, std::int64_t cols, std::int64_t valid, Ref row_max) {
  __shared__ Acc shared[32];
  const std::int64_t r = blockIdx.x, base = r * cols;
  Acc mx = neg_infinity<Acc>();
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    mx = max(mx, load<Acc>(logits, base + j));
  mx = block_max(mx, shared);
  if (threadIdx.x == 0) store(row_max, r, mx);
}

template <class Acc>
__global__ void row_sum_kernel(Ref logits, std::int64_t cols, std::int64_t valid, Ref row_max,
                               const std::int32_t* targets, std::int64_t col_begin, Ref row_sum,
                               Ref target_logit, bool store_exp) {
  __shared__ Acc shared[32];
  const std::int64_t r = blockIdx.x, base = r * cols;
  const Acc mx = load<Acc>(row_max, r);
  // The target's logit is read before any thread overwrites it with its exponential.
  if (threadIdx.x == 0) {
    const std::int64_t target = targets[r], t = target - col_begin;
    store(target_logit, r,
          target >= 0 && t >= 0 && t < valid ? load<Acc>(logits, base + t) : Acc(0));
  }
  __syncthreads();
  Acc sum = 0;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    const Acc e = exp_acc(load<Acc>(logits, base + j) - mx);
    if (store_exp) store(logits, base + j, e);
    sum += e;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) store(row_sum, r, sum);
}

// losses[r] = log(row_sum) + row_max - target_logit (0 for ignored rows); with backward the row
// becomes grad_scale * (softmax - onehot), padding columns (and ignored rows) 0.
template <class Acc>
__global__ void finish_kernel(Ref logits, std::int64_t cols, std::int64_t valid, Ref row_max,
                              Ref row_sum, Ref target_logit, const std::int32_t* targets,
                              std::int64_t col_begin, double* losses, bool backward,
                              double grad_scale) {
  const std::int64_t r = blockIdx.x, base = r * cols, target = targets[r];
  const Acc sum = load<Acc>(row_sum, r);
  if (threadIdx.x == 0)
    losses[r] = target < 0 ? 0.0
                           : static_cast<double>(log_acc(sum) + load<Acc>(row_max, r) -
                                                 load<Acc>(target_logit, r));
  if (!backward) return;
  const Acc gs = static_cast<Acc>(grad_scale), factor = gs / sum;
  const std::int64_t t = target - col_begin;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    Acc v = 0;
    if (target >= 0 && j < valid) {
      v = load<Acc>(logits, base + j) * factor;
      if (j == t) v -= gs;
    }
    store(logits, base + j, v);
  }
}

}  // namespace

void softmax_row_max(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, cudaStream_t stream) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (all_f64({logits, row_max}))
    KINTSUGI_CUDA_LAUNCH(row_max_kernel<double>, grid, row_threads(valid), 0, stream, logits, cols,
                         valid, row_max);
  else
    KINTSUGI_CUDA_LAUNCH(row_max_kernel<float>, grid, row_threads(valid), 0, stream, logits, cols,
                         valid, row_max);
  check_launch("row_max_kernel", stream);
}

void softmax_row_sum(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, const std::int32_t* targets, std::int64_t col_begin, Ref row_sum,
                     Ref target_logit, bool store_exp, cudaStream_t stream) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (all_f64({logits, row_max, row_sum, target_logit}))
    KINTSUGI_CUDA_LAUNCH(row_sum_kernel<double>, grid, row_threads(valid), 0, stream, logits, cols,
                         valid, row_max, targets, col_begin, row_sum, target_logit, store_exp);
  else
    KINTSUGI_CUDA_LAUNCH(row_sum_kernel<float>, grid, row_threads(valid), 0, stream, logits, cols,
                         valid, row_max, targets, col_begin, row_sum, target_logit, store_exp);
  check_launch("row_sum_kernel", stream);
}

std::size_t cross_entropy_scratch_bytes(std::int64_t rows) {
  return sizeof(double) * static_cast<std::size_t>(rows);
}

void cross_entropy_finish(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                          Ref row_max, Ref row_sum, Ref target_logit, const std::int32_t* targets,
                          std::int64_t col_begin, double* loss_sum, bool backward,
                          double grad_scale, Scratch scratch, cudaStream_t stream) {
  if (rows <= 0) return;
  auto* losses = static_cast<double*>(scratch.data);
  const unsigned grid = static_cast<unsigned>(rows);
  if (all_f64({logits, row_max, row_sum, target_logit}))
    KINTSUGI_CUDA_LAUNCH(finish_kernel<double>, grid, row_threads(cols), 0, stream, logits, cols,
                         valid, row_max, row_sum, target_logit, targets, col_begin, losses,
                         backward, grad_scale);
  else
    KINTSUGI_CUDA_LAUNCH(finish_kernel<float>, grid, row_threads(cols), 0, stream, logits, cols,
                         valid, row_max, row_sum, target_logit, targets, col_begin, losses,
                         backward, grad_scale);
  check_launch("finish_kernel", stream);
  sum_doubles(losses, rows, loss_sum, stream);
}

}  // namespace kintsugi::cuda
