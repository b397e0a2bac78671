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

// partial[block] = sum of squares of elements [block * kSquaresPerBlock, ...), in f64. Typed
// accessors on aligned tensors take runs of 8 (kSquaresPerBlock is a multiple of 8, so a block's
// runs never cross its end unless n does).
template <class R>
__global__ void square_partials_kernel(R x, std::int64_t n, bool vec, double* partial) {
  __shared__ double shared[32];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSquaresPerBlock;
  const std::int64_t end = begin + kSquaresPerBlock < n ? begin + kSquaresPerBlock : n;
  const std::int64_t whole = vec ? begin + (end - begin) / 8 * 8 : begin;
  double acc = 0;
  if constexpr (is_typed<R>)
    for (std::int64_t i = begin + 8 * threadIdx.x; i < whole; i += 8 * blockDim.x) {
      double v[8];
      load8(x, i, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc += v[e] * v[e];
    }
  for (std::int64_t i = whole + threadIdx.x; i < end; i += blockDim.x) {
    const double v = load<double>(x, i);
    acc += v * v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class Acc, class R>
struct ColumnTerm {
  R in;
  std::int64_t cols;
  __device__ void operator()(std::int64_t r, std::int64_t c, Acc* acc) const {
    acc[0] += load<Acc>(in, r * cols + c);
  }
};

template <class Acc, class R, class OR>
void column_sums_t(R in, OR out, std::int64_t rows, std::int64_t cols, bool accumulate,
                   Scratch scratch, cudaStream_t stream) {
  column_reduce<Acc, 1>(ColumnTerm<Acc, R>{in, cols}, rows, cols, out, OR{}, accumulate,
                        scratch.data, stream);
}

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
  const auto launch = [&](auto r, bool vec) {
    auto* kernel = square_partials_kernel<decltype(r)>;
    KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, r, n, vec,
                         partial);
    check_launch("square_partials_kernel", stream);
  };
  if (!run_typed(UniformTypes{}, {{x}}, [&](auto combo) {
        launch(typed<type_at<0, decltype(combo)>>(x), aligned16({x}));
      }))
    launch(x, false);  // the generic kernel: one element at a time, as before
  sum_doubles(partial, blocks, sum, stream);
}

std::size_t column_sums_scratch_bytes(std::int64_t rows, std::int64_t cols) {
  return column_partial_bytes<double>(1, rows, cols);  // room for either accumulator type
}

void column_sums(Ref in, Ref out, std::int64_t rows, std::int64_t cols, bool accumulate,
                 Scratch scratch, cudaStream_t stream) {
  if (run_typed(ValueGradTypes{}, {{in}, {out}}, [&](auto combo) {
        using V = type_at<0, decltype(combo)>;
        using G = type_at<1, decltype(combo)>;
        column_sums_t<acc_t<V>>(typed<V>(in), typed<G>(out), rows, cols, accumulate, scratch,
                                stream);
      }))
    return;
  if (all_f64({in, out}))
    column_sums_t<double>(in, out, rows, cols, accumulate, scratch, stream);
  else
    column_sums_t<float>(in, out, rows, cols, accumulate, scratch, stream);
}

}  // namespace kintsugi::cuda
