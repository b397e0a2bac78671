// Token (+ learned position) embeddings. The backward scatter-add is parallel over slices of
// the embedding dimension: each thread owns its columns of every row, so there are no races
// and repeated tokens are summed in batch order.
#include <algorithm>
#include <cstring>

#include "kintsugi/backend/cpu/kernels.hpp"

namespace kintsugi::cpu {

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                       const T* wte, std::int64_t vocab_rows, const T* wpe, T* out,
                       std::int64_t dim, std::int64_t vocab_begin) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = tokens[r] - vocab_begin;
    T* o = out + r * dim;
    if (id >= 0 && id < vocab_rows)
      std::memcpy(o, wte + id * dim, sizeof(T) * dim);
    else
      std::fill(o, o + dim, T(0));
    if (wpe) {
      const T* p = wpe + (r % seq) * dim;
#pragma omp simd
      for (std::int64_t c = 0; c < dim; ++c) o[c] += p[c];
    }
  }
}

template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, std::int64_t seq,
                        const T* dout, T* dwte, std::int64_t vocab_rows, bool accumulate_wte,
                        T* dwpe, std::int64_t position_rows, bool accumulate_wpe,
                        std::int64_t dim, std::int64_t vocab_begin) {
  if (!accumulate_wte) std::memset(dwte, 0, sizeof(T) * vocab_rows * dim);
  if (dwpe && !accumulate_wpe) std::memset(dwpe, 0, sizeof(T) * position_rows * dim);
  constexpr std::int64_t kSlice = 64;
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < dim; c0 += kSlice) {
    const std::int64_t c1 = std::min(dim, c0 + kSlice);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* g = dout + r * dim;
      const std::int64_t id = tokens[r] - vocab_begin;
      if (id >= 0 && id < vocab_rows) {
        T* w = dwte + id * dim;
#pragma omp simd
        for (std::int64_t c = c0; c < c1; ++c) w[c] += g[c];
      }
      if (dwpe) {
        T* p = dwpe + (r % seq) * dim;
#pragma omp simd
        for (std::int64_t c = c0; c < c1; ++c) p[c] += g[c];
      }
    }
  }
}

template void embedding_forward<float>(const std::int32_t*, std::int64_t, std::int64_t,
                                       const float*, std::int64_t, const float*, float*,
                                       std::int64_t, std::int64_t);
template void embedding_forward<double>(const std::int32_t*, std::int64_t, std::int64_t,
                                        const double*, std::int64_t, const double*, double*,
                                        std::int64_t, std::int64_t);
template void embedding_backward<float>(const std::int32_t*, std::int64_t, std::int64_t,
                                        const float*, float*, std::int64_t, bool, float*,
                                        std::int64_t, bool, std::int64_t, std::int64_t);
template void embedding_backward<double>(const std::int32_t*, std::int64_t, std::int64_t,
                                         const double*, double*, std::int64_t, bool, double*,
                                         std::int64_t, bool, std::int64_t, std::int64_t);

}  // namespace kintsugi::cpu
