// Generation's attention: the query of one new row per sequence against a key/value cache
// (Backend::attention_decode). One (sequence, head) per task: scores of keys 0..position
// (the last AttentionShape::window of them with a sliding window),
// softmax, weighted sum of the values, in the same arithmetic as a row of the training kernels
// (scaled dot products, ALiBi relative to the query, exp_fast); 16-bit caches are read a row at
// a time into f32.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kintsugi/backend/cpu/attention_common.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

namespace {

// Heads per task: `read(offset, scratch)` returns hd elements of the cache at `offset` (as T),
// `write(index, values)` stores head `index`'s hd outputs. area: position + 1 + 3 hd T's.
template <class T, class Read, class Write>
void decode_heads(const AttentionShape& s, std::int64_t position, T* area, std::int64_t b,
                  std::int64_t h, const Read& read, const Write& write) {
  const attn::QkvLayout at(s);
  const std::int64_t hd = s.head_dim, kvh = h / at.group;
  T* scores = area;
  T* acc = area + position + 1;
  T* q_scratch = acc + hd;
  T* row_scratch = q_scratch + hd;
  const T scale = T(1) / std::sqrt(T(hd));
  const T* q = read(at.q(b, h) + position * at.row_stride, q_scratch);
  // Keys first..position: all of them, or the last `window` (the sliding window).
  const std::int64_t first = attn::first_key(s, b, position);
  for (std::int64_t j = first; j <= position; ++j)
    scores[j] = scale * attn::dot_row(q, read(at.k(b, kvh) + j * at.row_stride, row_scratch), hd);
  attn::add_alibi_row(scores, first, position, static_cast<T>(attn::head_slope(s, h)));
  attn::softmax_causal_row(scores, first, position + 1, position + 1);
  std::fill(acc, acc + hd, T(0));
  for (std::int64_t j = first; j <= position; ++j) {
    const T* v = read(at.v(b, kvh) + j * at.row_stride, row_scratch);
    const T p = scores[j];
#pragma omp simd
    for (std::int64_t d = 0; d < hd; ++d) acc[d] += p * v[d];
  }
  write(b * s.heads + h, acc);
}

template <class T, class Read, class Write>
void decode(const AttentionShape& s, std::int64_t position, ThreadWorkspace& ws, const Read& read,
            const Write& write) {
  KINTSUGI_ASSERT(position >= 0 && position < s.seq && !s.doc_start);  // one document
  const std::size_t stride = ws.reserve((position + 1 + 3 * s.head_dim) * sizeof(T));
#pragma omp parallel
  {
    T* area = reinterpret_cast<T*>(ws.base() + stride * omp_get_thread_num());
#pragma omp for schedule(static)
    for (std::int64_t task = 0; task < s.batch * s.heads; ++task)
      decode_heads<T>(s, position, area, task / s.heads, task % s.heads, read, write);
  }
}

}  // namespace

template <class T>
void attention_decode(const AttentionShape& s, const T* cache, std::int64_t position, T* out,
                      ThreadWorkspace& ws) {
  const std::int64_t hd = s.head_dim;
  decode<T>(
      s, position, ws, [cache](std::int64_t offset, T*) { return cache + offset; },
      [out, hd](std::int64_t index, const T* values) {
        std::copy(values, values + hd, out + index * hd);
      });
}

template void attention_decode<float>(const AttentionShape&, const float*, std::int64_t, float*,
                                      ThreadWorkspace&);
template void attention_decode<double>(const AttentionShape&, const double*, std::int64_t,
                                       double*, ThreadWorkspace&);

namespace mixed {

void attention_decode(const AttentionShape& s, AnyPtr cache, std::int64_t position, AnyPtr out,
                      ThreadWorkspace& ws) {
  const std::int64_t hd = s.head_dim;
  decode<float>(
      s, position, ws,
      [cache, hd](std::int64_t offset, float* scratch) {
        return read_f32(cache.at(offset), hd, scratch);
      },
      [out, hd](std::int64_t index, const float* values) {
        const AnyPtr dst = out.at(index * hd);
        if (dst.is_f32()) std::copy(values, values + hd, dst.f32());
        else write_back(dst, hd, values);
      });
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_attention_decode(const AttentionShape& s, const Tensor& cache,
                                     std::int64_t position, const Tensor& out) {
  const Kind kind = kind_of({&cache, &out});
  if (kind == Kind::mixed)
    return cpu::mixed::attention_decode(s, AnyPtr(cache), position, AnyPtr(out), workspace_);
  typed(kind, [&]<class T>() {
    cpu::attention_decode(s, cache.as<T>(), position, out.as<T>(), workspace_);
  });
}

}  // namespace kintsugi::cpu
