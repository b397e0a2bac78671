// Token and learned-position embeddings. The token table's backward is a scatter-add with
// repeated ids; to keep it deterministic without atomics, the rows are sorted by token id (a
// stable radix sort, so equal ids keep their row order) and each distinct id's rows are summed
// in row order by one block, starting from the table's value (0 when not accumulating) -- the
// order of the CPU kernel.
#include <cub/device/device_radix_sort.cuh>

#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

template <class Acc>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, std::int64_t rows, Ref wte,
                                         std::int64_t vocab_rows, Ref out, std::int64_t dim,
                                         std::int64_t vocab_begin) {
  const std::int64_t n = rows * dim;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const std::int64_t r = i / dim, c = i % dim, id = tokens[r] - vocab_begin;
    store(out, i, id >= 0 && id < vocab_rows ? load<Acc>(wte, id * dim + c) : Acc(0));
  }
}

__global__ void iota_kernel(std::int32_t* values, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    values[i] = static_cast<std::int32_t>(i);
}

// Block i handles sorted position i if it starts a run of equal ids inside this shard: the run's
// rows of dout, in row order, are added to the table's row.
template <class Acc>
__global__ void embedding_segments_kernel(const std::int32_t* sorted_ids,
                                          const std::int32_t* sorted_rows, std::int64_t rows,
                                          Ref dout, Ref dwte, std::int64_t vocab_rows,
                                          std::int64_t dim, std::int64_t vocab_begin) {
  const std::int64_t i = blockIdx.x;
  const std::int32_t token = sorted_ids[i];
  if (i > 0 && sorted_ids[i - 1] == token) return;
  const std::int64_t id = token - vocab_begin;
  if (id < 0 || id >= vocab_rows) return;
  std::int64_t end = i + 1;
  while (end < rows && sorted_ids[end] == token) ++end;
  for (std::int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    Acc acc = load<Acc>(dwte, id * dim + c);
    for (std::int64_t j = i; j < end; ++j) acc += load<Acc>(dout, sorted_rows[j] * dim + c);
    store(dwte, id * dim + c, acc);
  }
}

template <class Acc>
__global__ void position_forward_kernel(Ref x, std::int64_t rows, Ref wpe, std::int64_t dim,
                                        std::int64_t seq, std::int64_t first_row) {
  const std::int64_t n = rows * dim;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const std::int64_t r = i / dim, c = i % dim;
    store(x, i, load<Acc>(x, i) + load<Acc>(wpe, ((first_row + r) % seq) * dim + c));
  }
}

// One thread per (position, column): the rows at that position, in row order.
template <class Acc>
__global__ void position_backward_kernel(Ref dx, std::int64_t rows, Ref dwpe,
                                         std::int64_t position_rows, std::int64_t dim,
                                         std::int64_t seq, bool accumulate,
                                         std::int64_t first_row) {
  const std::int64_t n = position_rows * dim;
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const std::int64_t p = i / dim, c = i % dim;
    Acc acc = accumulate ? load<Acc>(dwpe, i) : Acc(0);
    if (p < seq)
      for (std::int64_t r = ((p - first_row) % seq + seq) % seq; r < rows; r += seq)
        acc += load<Acc>(dx, r * dim + c);
    store(dwpe, i, acc);
  }
}

// The sort's buffers inside the caller's scratch: keys out, values in, values out, CUB's own.
struct SortScratch {
  std::int32_t *keys_out, *values_in, *values_out;
  void* cub;
  std::size_t cub_bytes;
};

std::size_t round_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

std::size_t cub_sort_bytes(std::int64_t rows) {
  std::size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(
            nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
            static_cast<std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
            static_cast<std::int32_t*>(nullptr), static_cast<int>(rows)),
        "cub::DeviceRadixSort::SortPairs (size query)");
  return bytes;
}

SortScratch carve(Scratch s, std::int64_t rows) {
  const std::size_t ids = round_up(sizeof(std::int32_t) * static_cast<std::size_t>(rows));
  auto* base = static_cast<char*>(s.data);
  return {reinterpret_cast<std::int32_t*>(base), reinterpret_cast<std::int32_t*>(base + ids),
          reinterpret_cast<std::int32_t*>(base + 2 * ids), base + 3 * ids, s.bytes - 3 * ids};
}

}  // namespace

void embedding_forward(const std::int32_t* tokens, std::int64_t rows, Ref wte,
                       std::int64_t vocab_rows, Ref out, std::int64_t dim, std::int64_t vocab_begin,
                       cudaStream_t stream) {
  KINTSUGI_LAUNCH(embedding_forward_kernel, rows * dim, stream, all_f64({wte, out}), tokens, rows,
                  wte, vocab_rows, out, dim, vocab_begin);
}

std::size_t embedding_backward_scratch_bytes(std::int64_t rows) {
  return 3 * round_up(sizeof(std::int32_t) * static_cast<std::size_t>(rows)) +
         round_up(cub_sort_bytes(rows));
}

void embedding_backward(const std::int32_t* tokens, std::int64_t rows, Ref dout, Ref dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin, Scratch scratch, cudaStream_t stream) {
  if (!accumulate)
    check(cudaMemsetAsync(dwte.data, 0,
                          static_cast<std::size_t>(vocab_rows * dim) * size_of(dwte.dtype), stream),
          "cudaMemsetAsync (embedding gradient)");
  if (rows <= 0 || dim <= 0) return;
  const SortScratch s = carve(scratch, rows);
  KINTSUGI_CUDA_LAUNCH(iota_kernel, grid_for(rows), kThreads, 0, stream, s.values_in, rows);
  check_launch("iota_kernel", stream);
  std::size_t cub_bytes = s.cub_bytes;
  check(cub::DeviceRadixSort::SortPairs(s.cub, cub_bytes, tokens, s.keys_out, s.values_in,
                                        s.values_out, static_cast<int>(rows), 0,
                                        static_cast<int>(8 * sizeof(std::int32_t)), stream),
        "cub::DeviceRadixSort::SortPairs");
  const int threads = row_threads(dim);
  if (all_f64({dout, dwte}))
    KINTSUGI_CUDA_LAUNCH(embedding_segments_kernel<double>, static_cast<unsigned>(rows), threads, 0,
                         stream, s.keys_out, s.values_out, rows, dout, dwte, vocab_rows, dim,
                         vocab_begin);
  else
    KINTSUGI_CUDA_LAUNCH(embedding_segments_kernel<float>, static_cast<unsigned>(rows), threads, 0,
                         stream, s.keys_out, s.values_out, rows, dout, dwte, vocab_rows, dim,
                         vocab_begin);
  check_launch("embedding_segments_kernel", stream);
}

void position_embedding_forward(Ref x, std::int64_t rows, Ref wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row, cudaStream_t stream) {
  KINTSUGI_LAUNCH(position_forward_kernel, rows * dim, stream, all_f64({x, wpe}), x, rows, wpe, dim,
                  seq, first_row);
}

void position_embedding_backward(Ref dx, std::int64_t rows, Ref dwpe, std::int64_t position_rows,
                                 std::int64_t dim, std::int64_t seq, bool accumulate,
                                 std::int64_t first_row, cudaStream_t stream) {
  KINTSUGI_LAUNCH(position_backward_kernel, position_rows * dim, stream, all_f64({dx, dwpe}), dx,
                  rows, dwpe, position_rows, dim, seq, accumulate, first_row);
}

}  // namespace kintsugi::cuda
