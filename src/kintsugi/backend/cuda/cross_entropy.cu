// Softmax cross-entropy, one block per row of logits: in the three passes of backend.hpp (the
// vocabulary-parallel interface), and fused into one kernel for logits holding the whole
// vocabulary (Backend::cross_entropy_fused). The losses of the rows go to scratch and are summed
// into the f64 loss sum by one block in a fixed order (reductions.cuh), so the loss is
// deterministic.
//
// The three passes go element by element, unlike the other memory-bound kernels: runs of 8
// (load8/store8, as in elementwise.cu) measured slower here on an H200, 17.8 against 13.5 ms per
// GPT-2 124M step (f32 logits, 512 threads per row); why is not yet understood. The fused kernel
// has its element type at compile time and moves 16 bytes per access (not yet timed on a GPU).
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


// ---- fused: one kernel per chunk of rows. A block takes a row: pass 1 reads it once, keeping
// per thread a running maximum and a sum of exponentials rescaled whenever the maximum grows
// (online softmax); the block then combines the threads' pairs (block_max, each sum rescaled to
// the row maximum, block_sum: a fixed order). Pass 2 (backward only) reads the row again,
// mostly from L2 (a block of 1024 threads keeps about 2 rows per SM in flight: 264 x 100 KB of
// bf16 GPT-2 rows, against the H200's 50 MB of L2), and writes grad_scale * (softmax - onehot)
// over it. HBM traffic is thus about one read and one write of the logits, against three reads
// and two writes for the three passes.

// Elements i..i+K-1 of a row of T: one 16-byte access when K * sizeof(T) == 16 (the row and i
// aligned), else K == 1. Widened to Acc and narrowed back as load() and store() do
// (device_math.cuh).
template <class T, int K, class Acc>
__device__ __forceinline__ void load_k(const Ref& r, std::int64_t i, Acc (&v)[K]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + K - 1);
  T h[K];
  if constexpr (K * sizeof(T) == 16) {
    const uint4 w = load16(static_cast<const T*>(r.data) + i);
    std::memcpy(h, &w, sizeof h);
  } else {
    static_assert(K == 1);
    h[0] = static_cast<const T*>(r.data)[i];
  }
#pragma unroll
  for (int e = 0; e < K; ++e) v[e] = widen<Acc>(h[e]);
}
template <class T, int K, class Acc>
__device__ __forceinline__ void store_k(const Ref& r, std::int64_t i, const Acc (&v)[K]) {
  KINTSUGI_CUDA_CHECK_INDEX(r, i);
  KINTSUGI_CUDA_CHECK_INDEX(r, i + K - 1);
  T h[K];
#pragma unroll
  for (int e = 0; e < K; ++e) h[e] = narrow<T>(v[e]);
  if constexpr (K * sizeof(T) == 16) {
    uint4 w;
    std::memcpy(&w, h, sizeof h);
    store16(static_cast<T*>(r.data) + i, w);
  } else {
    static_cast<T*>(r.data)[i] = h[0];
  }
}

constexpr int kFusedThreads = 1024;  // at most, per block (one row)

// Thread t takes elements [K t, K t + K), then K (t + blockDim.x), ...: K = 16 / sizeof(T) when
// a row is whole 16-byte runs, else 1. Rows whose target is < 0 give loss 0 and, with backward,
// zeros.
template <class T, class Acc, int K>
__global__ void __launch_bounds__(kFusedThreads)
    cross_entropy_fused_kernel(Ref logits, std::int64_t cols, std::int64_t valid,
                               const std::int32_t* targets, double* losses, bool backward,
                               double grad_scale) {
  __shared__ Acc shared[32];
  const std::int64_t r = blockIdx.x, base = r * cols;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * K;
  const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * K;
  const std::int32_t target = targets[r];
  if (target < 0) {  // the whole block: no barrier is left behind
    if (threadIdx.x == 0) losses[r] = 0.0;
    if (backward)
      for (std::int64_t j = first; j < cols; j += stride) {
        Acc z[K];
#pragma unroll
        for (int e = 0; e < K; ++e) z[e] = Acc(0);
        store_k<T, K>(logits, base + j, z);
      }
    return;
  }
  // A target among the padding columns is no column of the softmax (as on the CPU).
  const std::int64_t t = target < valid ? target : -1;
  // Read before any thread can overwrite it (pass 2 starts after the barriers below).
  const Acc target_logit = threadIdx.x == 0 && t >= 0 ? load<Acc>(logits, base + t) : Acc(0);
  const Acc neg_inf = neg_infinity<Acc>();
  Acc mx = neg_inf, sum = 0;
  for (std::int64_t j = first; j < valid; j += stride) {
    Acc v[K];
    load_k<T, K>(logits, base + j, v);
    const std::int64_t n = valid - j;  // real columns in this run: K but at the end
    Acc run_max = mx;
#pragma unroll
    for (int e = 0; e < K; ++e)
      if (e < n) run_max = max(run_max, v[e]);
    if (run_max == neg_inf) continue;  // -inf logits only so far: nothing to add
    Acc part = 0;
#pragma unroll
    for (int e = 0; e < K; ++e)
      if (e < n) part += exp_acc(v[e] - run_max);
    sum = sum * exp_acc(mx - run_max) + part;  // exp(-inf) = 0 on the first run
    mx = run_max;
  }
  const Acc row_max = block_max(mx, shared);
  const Acc row_sum = block_sum(mx == neg_inf ? Acc(0) : sum * exp_acc(mx - row_max), shared);
  if (threadIdx.x == 0)
    losses[r] = static_cast<double>(log_acc(row_sum) + row_max - target_logit);
  if (!backward) return;
  // As the CPU's gradient_row: exp(x - max) * (grad_scale / sum), minus grad_scale at the target.
  const Acc gs = static_cast<Acc>(grad_scale), factor = gs / row_sum;
  for (std::int64_t j = first; j < cols; j += stride) {
    Acc v[K];
    load_k<T, K>(logits, base + j, v);
#pragma unroll
    for (int e = 0; e < K; ++e) {
      const std::int64_t c = j + e;
      Acc g = c < valid ? exp_acc(v[e] - row_max) * factor : Acc(0);
      if (c == t) g -= gs;
      v[e] = g;
    }
    store_k<T, K>(logits, base + j, v);
  }
}

template <class T, class Acc>
void launch_fused(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                  const std::int32_t* targets, double* losses, bool backward, double grad_scale,
                  cudaStream_t stream) {
  constexpr int kRun = static_cast<int>(16 / sizeof(T));
  const bool vec = cols % kRun == 0 && aligned16({logits});
  const std::int64_t accesses = vec ? cols / kRun : cols;
  int threads = 32;
  while (threads < kFusedThreads && threads < accesses) threads *= 2;
  const unsigned grid = static_cast<unsigned>(rows);
  auto* kernel =
      vec ? cross_entropy_fused_kernel<T, Acc, kRun> : cross_entropy_fused_kernel<T, Acc, 1>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid, threads, 0, stream, logits, cols, valid, targets, losses,
                       backward, grad_scale);
  check_launch("cross_entropy_fused_kernel", stream);
}

}  // namespace

void softmax_row_max(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, cudaStream_t stream) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  with_acc({logits, row_max}, [&](auto acc) {
    KINTSUGI_CUDA_LAUNCH(row_max_kernel<decltype(acc)>, grid, row_threads(valid), 0, stream, logits,
                         cols, valid, row_max);
  });
  check_launch("row_max_kernel", stream);
}

void softmax_row_sum(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, const std::int32_t* targets, std::int64_t col_begin, Ref row_sum,
                     Ref target_logit, bool store_exp, cudaStream_t stream) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  with_acc({logits, row_max, row_sum, target_logit}, [&](auto acc) {
    KINTSUGI_CUDA_LAUNCH(row_sum_kernel<decltype(acc)>, grid, row_threads(valid), 0, stream, logits,
                         cols, valid, row_max, targets, col_begin, row_sum, target_logit,
                         store_exp);
  });
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
  with_acc({logits, row_max, row_sum, target_logit}, [&](auto acc) {
    KINTSUGI_CUDA_LAUNCH(finish_kernel<decltype(acc)>, grid, row_threads(cols), 0, stream, logits,
                         cols, valid, row_max, row_sum, target_logit, targets, col_begin, losses,
                         backward, grad_scale);
  });
  check_launch("finish_kernel", stream);
  sum_doubles(losses, rows, loss_sum, stream);
}


void cross_entropy_fused(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                         const std::int32_t* targets, double* loss_sum, bool backward,
                         double grad_scale, Scratch scratch, cudaStream_t stream) {
  if (rows <= 0) return;
  auto* losses = static_cast<double*>(scratch.data);
  switch (logits.dtype) {
    case DType::f64:
      launch_fused<double, double>(logits, rows, cols, valid, targets, losses, backward,
                                   grad_scale, stream);
      break;
    case DType::f32:
      launch_fused<float, float>(logits, rows, cols, valid, targets, losses, backward, grad_scale,
                                 stream);
      break;
    case DType::bf16:
      launch_fused<__nv_bfloat16, float>(logits, rows, cols, valid, targets, losses, backward,
                                         grad_scale, stream);
      break;
    default:  // f16 (the backend takes float tensors only)
      launch_fused<__half, float>(logits, rows, cols, valid, targets, losses, backward,
                                  grad_scale, stream);
  }
  sum_doubles(losses, rows, loss_sum, stream);
}

}  // namespace kintsugi::cuda
