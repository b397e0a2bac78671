// Generation's attention (Backend::attention_decode): the query of one new row per sequence
// against rows 0..position of a key/value cache. One block per (sequence, head): its threads
// score the keys (kept in the caller's scratch), the block finds the maximum and the sum of
// exponentials, then each thread weighs the values for its dimensions. One row of work, so
// no tiling: the cost is reading the cache once.
#include "kintsugi/backend/cuda/attention_common.cuh"
#include "kintsugi/backend/cuda/kernels.hpp"

namespace kintsugi::cuda {

namespace {

constexpr int kDecodeThreads = 128;

template <class Acc>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(AttnShape s, Ref cache, std::int64_t position, Ref out, Acc* scores,
                            Acc scale) {
  const attn::QkvIndex L(s);
  const std::int64_t b = blockIdx.x / s.heads, h = blockIdx.x % s.heads, hd = s.head_dim;
  // Keys first..position: all, or the last s.window of them (the sliding window). row[k] is
  // key first + k.
  const std::int64_t kvh = h / L.group, first = attn::first_key(s, b, position);
  const std::int64_t keys = position + 1 - first;
  Acc* q = dynamic_shared<Acc>();  // [hd], then 32 values for the block reductions
  Acc* reduce = q + hd;
  Acc* row = scores + blockIdx.x * (position + 1);  // the scratch holds position + 1 per block
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x)
    q[d] = load<Acc>(cache, L.q(b, h, position) + d);
  __syncthreads();
  const Acc slope = static_cast<Acc>(attn::head_slope(s, h));
  Acc mx = neg_infinity<Acc>();
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const std::int64_t k = L.k(b, kvh, first + j);
    Acc dot = 0;
    for (std::int64_t d = 0; d < hd; ++d) dot += q[d] * load<Acc>(cache, k + d);
    // ALiBi relative to the query
    row[j] = scale * dot + slope * static_cast<Acc>(first + j - position);
    mx = max(mx, row[j]);
  }
  mx = block_max(mx, reduce);
  Acc sum = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    row[j] = exp_acc(row[j] - mx);
    sum += row[j];
  }
  sum = block_sum(sum, reduce);  // its barriers also publish row[] to every thread
  const Acc inv = Acc(1) / sum;
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    Acc acc = 0;
    for (std::int64_t j = 0; j < keys; ++j)
      acc += row[j] * load<Acc>(cache, L.v(b, kvh, first + j) + d);
    store(out, blockIdx.x * hd + d, acc * inv);
  }
}

template <class Acc>
void launch_decode(const AttnShape& s, Ref cache, std::int64_t position, Ref out,
                   Scratch scratch, cudaStream_t stream) {
  const std::size_t shared = sizeof(Acc) * static_cast<std::size_t>(s.head_dim + 32);
  const Acc scale = Acc(1) / std::sqrt(static_cast<Acc>(s.head_dim));  // as the CPU's
  KINTSUGI_CUDA_LAUNCH(attention_decode_kernel<Acc>, static_cast<unsigned>(s.batch * s.heads),
                       kDecodeThreads, shared, stream, s, cache, position, out,
                       static_cast<Acc*>(scratch.data), scale);
  check_launch("attention_decode_kernel", stream);
}

}  // namespace

std::size_t attention_decode_scratch_bytes(const AttnShape& s, std::int64_t position,
                                           DType dtype) {
  const std::size_t acc = dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return acc * static_cast<std::size_t>(s.batch * s.heads * (position + 1));
}

void attention_decode(const AttnShape& s, Ref cache, std::int64_t position, Ref out,
                      Scratch scratch, cudaStream_t stream) {
  if (s.batch * s.heads <= 0) return;
  with_acc({cache, out}, [&](auto acc) {
    launch_decode<decltype(acc)>(s, cache, position, out, scratch, stream);
  });
}

}  // namespace kintsugi::cuda
