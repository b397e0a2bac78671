// Sums of squares, column sums and sums of doubles (reductions.cuh), deterministic by
// construction: fixed partitions, fixed order, no atomics.
#include "kintsugi/backend/cuda/reductions.cuh"

namespace kintsugi::cuda {

namespace {

constexpr int kSumThreads = 1024;
constexpr std::int64_t kSquaresPerBlock = 8192;  // elements per partial sum of sum_squares

__global__ void sum_doubles_kernel(const double* values, std::int64_t n, double* total) {
  __shared__ double shared[32];
  double acc = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *total += acc;
}

// partial[block] = sum of squares of elements [block * kSquaresPerBlock, ...), in f64.
__global__ void square_partials_kernel(Ref x, std::int64_t n, double* partial) {
  __shared__ double shared[32];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSquaresPerBlock;
  const std::int64_t end = begin + kSquaresPerBlock < n ? begin + kSquaresPerBlock : n;
  double acc = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = load<double>(x, i);
    acc += v * v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class Acc>
struct ColumnTerm {
  Ref in;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    acc[0] += load<Acc>(in, r * cols + c);
  }
};

}  // namespace

void sum_doubles(const double* values, std::int64_t n, double* total, cudaStream_t stream) {
  KINTSUGI_CUDA_LAUNCH(sum_doubles_kernel, 1, kSumThreads, 0, stream, values, n, total);
  check_launch("sum_doubles_kernel", stream);
}

std::size_t sum_squares_scratch_bytes(std::int64_t n) {
  return sizeof(double) * static_cast<std::size_t>((n + kSquaresPerBlock - 1) / kSquaresPerBlock);
}

void sum_squares(Ref x, std::int64_t n, double* sum, Scratch scratch, cudaStream_t stream) {
  if (n <= 0) return;
  const std::int64_t blocks = (n + kSquaresPerBlock - 1) / kSquaresPerBlock;
  auto* partial = static_cast<double*>(scratch.data);
  KINTSUGI_CUDA_LAUNCH(square_partials_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream,
                       x, n, partial);
  check_launch("square_partials_kernel", stream);
  sum_doubles(partial, blocks, sum, stream);
}

std::size_t column_sums_scratch_bytes(std::int64_t rows, std::int64_t cols) {
  return column_partial_bytes<double>(1, rows, cols);  // room for either accumulator type
}

void column_sums(Ref in, Ref out, std::int64_t rows, std::int64_t cols, bool accumulate,
                 Scratch scratch, cudaStream_t stream) {
  if (all_f64({in, out}))
    column_reduce<double, 1>(ColumnTerm<double>{in, cols}, rows, cols, out, Ref{}, accumulate,
                             scratch.data, stream);
  else
    column_reduce<float, 1>(ColumnTerm<float>{in, cols}, rows, cols, out, Ref{}, accumulate,
                            scratch.data, stream);
}

}  // namespace kintsugi::cuda
