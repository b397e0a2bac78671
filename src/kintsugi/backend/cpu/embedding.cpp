// Token and learned-position embeddings. Backward scatter-adds are parallel over slices of the
// embedding dimension: each thread owns its columns of every row, so there are no races and
// repeated tokens (or positions) are summed in row order.
#include <algorithm>
#include <cstring>

#include "kintsugi/backend/cpu/kernels.hpp"

namespace kintsugi::cpu {

namespace {
constexpr std::int64_t kSlice = 64;
}

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t rows, const T* wte,
                       std::int64_t vocab_rows, T* out, std::int64_t dim,
                       std::int64_t vocab_begin) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = tokens[r] - vocab_begin;
    T* o = out + r * dim;
    if (id >= 0 && id < vocab_rows)
      std::memcpy(o, wte + id * dim, sizeof(T) * dim);
    else
      std::fill(o, o + dim, T(0));
  }
}

template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, const T* dout, T* dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin) {
  if (!accumulate) std::memset(dwte, 0, sizeof(T) * vocab_rows * dim);
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < dim; c0 += kSlice) {
    const std::int64_t c1 = std::min(dim, c0 + kSlice);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t id = tokens[r] - vocab_begin;
      if (id < 0 || id >= vocab_rows) continue;
      const T* g = dout + r * dim;
      T* w = dwte + id * dim;
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) w[c] += g[c];
    }
  }
}

template <class T>
void position_embedding_forward(T* x, std::int64_t rows, const T* wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = x + r * dim;
    const T* p = wpe + ((first_row + r) % seq) * dim;
#pragma omp simd
    for (std::int64_t c = 0; c < dim; ++c) o[c] += p[c];
  }
}

template <class T>
void position_embedding_backward(const T* dx, std::int64_t rows, T* dwpe,
                                 std::int64_t position_rows, std::int64_t dim, std::int64_t seq,
                                 bool accumulate, std::int64_t first_row) {
  if (!accumulate) std::memset(dwpe, 0, sizeof(T) * position_rows * dim);
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < dim; c0 += kSlice) {
    const std::int64_t c1 = std::min(dim, c0 + kSlice);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* g = dx + r * dim;
      T* p = dwpe + ((first_row + r) % seq) * dim;
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) p[c] += g[c];
    }
  }
}

#define KINTSUGI_INSTANTIATE(T)                                                                 \
  template void embedding_forward<T>(const std::int32_t*, std::int64_t, const T*, std::int64_t, \
                                     T*, std::int64_t, std::int64_t);                           \
  template void embedding_backward<T>(const std::int32_t*, std::int64_t, const T*, T*,          \
                                      std::int64_t, std::int64_t, bool, std::int64_t);          \
  template void position_embedding_forward<T>(T*, std::int64_t, const T*, std::int64_t,        \
                                              std::int64_t, std::int64_t);                      \
  template void position_embedding_backward<T>(const T*, std::int64_t, T*, std::int64_t,       \
                                               std::int64_t, std::int64_t, bool, std::int64_t);
KINTSUGI_INSTANTIATE(float)
KINTSUGI_INSTANTIATE(double)
#undef KINTSUGI_INSTANTIATE

}  // namespace kintsugi::cpu
