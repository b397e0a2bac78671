// Token and learned-position embeddings. The token table's backward is a scatter-add with
// repeated ids; to keep it deterministic without atomics, the rows are sorted by token id (a
// stable radix sort, so equal ids keep their row order) and each distinct id's rows are summed
// in row order by one block, starting from the table's value (0 when not accumulating) -- the
// order of the CPU kernel.
#include <cub/device/device_radix_sort.cuh>

#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

// out[r, c] = wte[tokens[r] - vocab_begin, c], or 0 for ids outside this shard. In runs of 8
// columns when `vec` (dim a multiple of 8, both tables aligned16).
template <class Acc, class R>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, std::int64_t rows, R wte,
                                         std::int64_t vocab_rows, R out, std::int64_t dim,
                                         std::int64_t vocab_begin, bool vec) {
  const std::int64_t n = rows * dim;
  if constexpr (is_typed<R>)
    if (vec) {
      for (std::int64_t i = global_index() * 8; i < n; i += global_stride() * 8) {
        const std::int64_t r = i / dim, c = i % dim, id = tokens[r] - vocab_begin;
        Acc v[8];
        if (id >= 0 && id < vocab_rows)
          load8(wte, id * dim + c, v);
        else
          for (int e = 0; e < 8; ++e) v[e] = Acc(0);
        store8(out, i, v);
      }
      return;
    }
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
template <class Acc, class R, class GR>
__global__ void embedding_segments_kernel(const std::int32_t* sorted_ids,
                                          const std::int32_t* sorted_rows, std::int64_t rows,
                                          R dout, GR dwte, std::int64_t vocab_rows,
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

// x[r, c] += wpe[(first_row + r) % seq, c]; in runs of 8 columns when `vec`.
template <class Acc, class R>
__global__ void position_forward_kernel(R x, std::int64_t rows, R wpe, std::int64_t dim,
                                        std::int64_t seq, std::int64_t first_row, bool vec) {
  const std::int64_t n = rows * dim;
  if constexpr (is_typed<R>)
    if (vec) {
      for (std::int64_t i = global_index() * 8; i < n; i += global_stride() * 8) {
        const std::int64_t r = i / dim, c = i % dim;
        Acc v[8], p[8];
        load8(x, i, v);
        load8(wpe, ((first_row + r) % seq) * dim + c, p);
        for (int e = 0; e < 8; ++e) v[e] += p[e];
        store8(x, i, v);
      }
      return;
    }
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const std::int64_t r = i / dim, c = i % dim;
    store(x, i, load<Acc>(x, i) + load<Acc>(wpe, ((first_row + r) % seq) * dim + c));
  }
}

// One thread per (position, column): the rows at that position, in row order.
template <class Acc, class R, class GR>
__global__ void position_backward_kernel(R dx, std::int64_t rows, GR dwpe,
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

template <class Acc, class R>
void embedding_forward_t(const std::int32_t* tokens, std::int64_t rows, R wte,
                         std::int64_t vocab_rows, R out, std::int64_t dim,
                         std::int64_t vocab_begin, bool vec, cudaStream_t stream) {
  const std::int64_t n = rows * dim;
  if (n <= 0) return;
  auto* kernel = embedding_forward_kernel<Acc, R>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for(vec ? n / 8 : n), kThreads, 0, stream, tokens, rows, wte,
                       vocab_rows, out, dim, vocab_begin, vec);
  check_launch("embedding_forward_kernel", stream);
}

template <class Acc, class R, class GR>
void embedding_segments_t(const SortScratch& s, std::int64_t rows, R dout, GR dwte,
                          std::int64_t vocab_rows, std::int64_t dim, std::int64_t vocab_begin,
                          cudaStream_t stream) {
  auto* kernel = embedding_segments_kernel<Acc, R, GR>;
  KINTSUGI_CUDA_LAUNCH(kernel, static_cast<unsigned>(rows), row_threads(dim), 0, stream,
                       s.keys_out, s.values_out, rows, dout, dwte, vocab_rows, dim, vocab_begin);
  check_launch("embedding_segments_kernel", stream);
}

template <class Acc, class R>
void position_forward_t(R x, std::int64_t rows, R wpe, std::int64_t dim, std::int64_t seq,
                        std::int64_t first_row, bool vec, cudaStream_t stream) {
  const std::int64_t n = rows * dim;
  if (n <= 0) return;
  auto* kernel = position_forward_kernel<Acc, R>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for(vec ? n / 8 : n), kThreads, 0, stream, x, rows, wpe, dim,
                       seq, first_row, vec);
  check_launch("position_forward_kernel", stream);
}

template <class Acc, class R, class GR>
void position_backward_t(R dx, std::int64_t rows, GR dwpe, std::int64_t position_rows,
                         std::int64_t dim, std::int64_t seq, bool accumulate,
                         std::int64_t first_row, cudaStream_t stream) {
  const std::int64_t n = position_rows * dim;
  if (n <= 0) return;
  auto* kernel = position_backward_kernel<Acc, R, GR>;
  KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, dx, rows, dwpe, position_rows, dim,
                       seq, accumulate, first_row);
  check_launch("position_backward_kernel", stream);
}

}  // namespace

// The typed kernels take the table and the activations in one type (UniformTypes) and the
// tables' gradients in the activations' type or f32 (ValueGradTypes), as the model passes them
// (model/layers.cpp); runs of 8 only on the typed path, which is where the GPU time is spent.
void embedding_forward(const std::int32_t* tokens, std::int64_t rows, Ref wte,
                       std::int64_t vocab_rows, Ref out, std::int64_t dim, std::int64_t vocab_begin,
                       cudaStream_t stream) {
  if (run_typed(UniformTypes{}, {{wte, out}}, [&](auto combo) {
        using T = type_at<0, decltype(combo)>;
        embedding_forward_t<acc_t<T>>(tokens, rows, typed<T>(wte), vocab_rows, typed<T>(out), dim,
                                      vocab_begin, dim % 8 == 0 && aligned16({wte, out}), stream);
      }))
    return;
  with_acc({wte, out}, [&](auto acc) {
    embedding_forward_t<decltype(acc)>(tokens, rows, wte, vocab_rows, out, dim, vocab_begin, false,
                                       stream);
  });
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
  if (run_typed(ValueGradTypes{}, {{dout}, {dwte}}, [&](auto combo) {
        using V = type_at<0, decltype(combo)>;
        using G = type_at<1, decltype(combo)>;
        embedding_segments_t<acc_t<V>>(s, rows, typed<V>(dout), typed<G>(dwte), vocab_rows, dim,
                                       vocab_begin, stream);
      }))
    return;
  with_acc({dout, dwte}, [&](auto acc) {
    embedding_segments_t<decltype(acc)>(s, rows, dout, dwte, vocab_rows, dim, vocab_begin, stream);
  });
}

void position_embedding_forward(Ref x, std::int64_t rows, Ref wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row, cudaStream_t stream) {
  if (run_typed(UniformTypes{}, {{x, wpe}}, [&](auto combo) {
        using T = type_at<0, decltype(combo)>;
        position_forward_t<acc_t<T>>(typed<T>(x), rows, typed<T>(wpe), dim, seq, first_row,
                                     dim % 8 == 0 && aligned16({x, wpe}), stream);
      }))
    return;
  with_acc({x, wpe}, [&](auto acc) {
    position_forward_t<decltype(acc)>(x, rows, wpe, dim, seq, first_row, false, stream);
  });
}

void position_embedding_backward(Ref dx, std::int64_t rows, Ref dwpe, std::int64_t position_rows,
                                 std::int64_t dim, std::int64_t seq, bool accumulate,
                                 std::int64_t first_row, cudaStream_t stream) {
  if (run_typed(ValueGradTypes{}, {{dx}, {dwpe}}, [&](auto combo) {
        using V = type_at<0, decltype(combo)>;
        using G = type_at<1, decltype(combo)>;
        position_backward_t<acc_t<V>>(typed<V>(dx), rows, typed<G>(dwpe), position_rows, dim, seq,
                                      accumulate, first_row, stream);
      }))
    return;
  with_acc({dx, dwpe}, [&](auto acc) {
    position_backward_t<decltype(acc)>(dx, rows, dwpe, position_rows, dim, seq, accumulate,
                                       first_row, stream);
  });
}

}  // namespace kintsugi::cuda
