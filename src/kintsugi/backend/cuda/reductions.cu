// Sums of squares, column sums and sums of doubles (reductions.cuh), deterministic by
// construction: fixed partitions, fixed order, no atomics.
#include "kintsugi/backend/cuda/reductions.cuh"

#include "kintsugi/backend/cuda/multi_tensor.cuh"

namespace kintsugi::cuda {

namespace {

constexpr int kSumThreads = 1024;
constexpr std::int64_t kSquaresPerBlock = 8192;  // elements per partial sum of sum_squares

// The block's sum of values[0..n), each thread taking every blockDim.x-th value (the block's
// result on every thread).
__device__ __forceinline__ double sum_doubles_block(const double* values, std::int64_t n,
                                                   double* shared) {
  double acc = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  return block_sum(acc, shared);
}

__global__ void sum_doubles_kernel(const double* values, std::int64_t n, double* total) {
  __shared__ double shared[32];
  const double acc = sum_doubles_block(values, n, shared);
  if (threadIdx.x == 0) *total += acc;
}

// The sum of squares of elements [begin, end) of x, in f64, over the block (its result on every
// thread). Typed accessors on aligned tensors (`vec`) take runs of 8 from begin (a multiple of
// 8, as kSquaresPerBlock is, so a block's runs never cross its end unless n does).
template <class R>
__device__ __forceinline__ double square_sum_block(R x, std::int64_t begin, std::int64_t end,
                                                   bool vec, double* shared) {
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
  return block_sum(acc, shared);
}

// partial[block] = sum of squares of elements [block * kSquaresPerBlock, ...), in f64.
template <class R>
__global__ void square_partials_kernel(R x, std::int64_t n, bool vec, double* partial) {
  __shared__ double shared[32];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSquaresPerBlock;
  const std::int64_t end = begin + kSquaresPerBlock < n ? begin + kSquaresPerBlock : n;
  const double acc = square_sum_block(x, begin, end, vec, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// ---- sums of squares over many ranges (kernels.hpp, "many flat ranges"): the three stages of
// sum_squares_multi, each computing what sum_squares computes for one range.
struct SquaresEntry {  // 32 bytes, no padding (multi_tensor.cuh)
  void* x;
  std::int64_t n, first_block;
  std::int32_t vec, unused;
};

// partial[block]: block's slice of its range, as square_partials_kernel computes it.
template <class T>
__global__ void square_partials_multi_kernel(Table<SquaresEntry> table, double* partial) {
  __shared__ double shared[32];
  const std::int64_t block = blockIdx.x;
  const SquaresEntry e = entry_of_block(table, block);
  const std::int64_t begin = (block - e.first_block) * kSquaresPerBlock;
  const std::int64_t end = smaller(begin + kSquaresPerBlock, e.n);
  const double acc =
      square_sum_block(Typed<T>{static_cast<T*>(e.x), e.n}, begin, end, e.vec != 0, shared);
  if (threadIdx.x == 0) partial[block] = acc;
}

// total[r] = range r's partials summed as sum_doubles_kernel sums them (kSumThreads threads).
__global__ void range_totals_kernel(Table<SquaresEntry> table, const double* partial,
                                    double* total) {
  __shared__ double shared[32];
  const std::int64_t r = blockIdx.x;
  KINTSUGI_CUDA_CHECK_INDEX(table, r);
  const SquaresEntry e = table.data[r];
  const double acc =
      sum_doubles_block(partial + e.first_block, blocks_for(e.n, kSquaresPerBlock), shared);
  if (threadIdx.x == 0) total[r] = acc;
}

// *sum += values[0], then values[1], ...: the order of one sum_squares call per range.
__global__ void add_in_order_kernel(const double* values, std::int64_t n, double* sum) {
  if (threadIdx.x != 0) return;
  double acc = *sum;
  for (std::int64_t i = 0; i < n; ++i) acc += values[i];
  *sum = acc;
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

namespace {

// The table of sum_squares_multi's ranges (empty ones left out: sum_squares adds nothing for
// them), and the blocks of all of them.
std::vector<SquaresEntry> squares_entries(const Ref* xs, std::int64_t count, std::int64_t* blocks) {
  std::vector<SquaresEntry> entries;
  *blocks = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    if (xs[i].count <= 0) continue;
    entries.push_back(
        SquaresEntry{xs[i].data, xs[i].count, *blocks, aligned16({xs[i]}) ? 1 : 0, 0});
    *blocks += blocks_for(xs[i].count, kSquaresPerBlock);
  }
  return entries;
}

}  // namespace

std::size_t sum_squares_multi_scratch_bytes(const Ref* xs, std::int64_t count) {
  std::int64_t blocks = 0;
  const std::size_t ranges = squares_entries(xs, count, &blocks).size();
  return sizeof(double) * (static_cast<std::size_t>(blocks) + ranges);
}

bool sum_squares_multi(const Ref* xs, std::int64_t count, double* sum, TableCache& tables,
                       Scratch scratch, cudaStream_t stream) {
  for (std::int64_t i = 1; i < count; ++i)
    if (xs[i].dtype != xs[0].dtype) return false;
  std::int64_t blocks = 0;
  const std::vector<SquaresEntry> entries = squares_entries(xs, count, &blocks);
  if (entries.empty()) return true;  // sum_squares adds nothing for empty ranges
  return run_typed(UniformTypes{}, {{xs[0]}}, [&](auto combo) {
    using T = type_at<0, decltype(combo)>;
    const Table<SquaresEntry> table = upload(entries, tables);
    auto* partial = static_cast<double*>(scratch.data);
    double* totals = partial + blocks;
    auto* partials_kernel = square_partials_multi_kernel<T>;
    KINTSUGI_CUDA_LAUNCH(partials_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream,
                         table, partial);
    check_launch("square_partials_multi_kernel", stream);
    KINTSUGI_CUDA_LAUNCH(range_totals_kernel, static_cast<unsigned>(table.count), kSumThreads, 0,
                         stream, table, partial, totals);
    check_launch("range_totals_kernel", stream);
    KINTSUGI_CUDA_LAUNCH(add_in_order_kernel, 1, 32, 0, stream, totals, table.count, sum);
    check_launch("add_in_order_kernel", stream);
  });
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
  with_acc({in, out}, [&](auto acc) {
    column_sums_t<decltype(acc)>(in, out, rows, cols, accumulate, scratch, stream);
  });
}

}  // namespace kintsugi::cuda
