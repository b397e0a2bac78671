// Token and learned-position embeddings. Backward scatter-adds are parallel over slices of the
// embedding dimension: each thread owns its columns of every row, so there are no races and
// repeated tokens (or positions) are summed in row order.
#include <algorithm>
#include <cstring>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

namespace {
constexpr std::int64_t kEmbeddingColumns = 64;
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
  for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
    const std::int64_t c1 = std::min(dim, c0 + kEmbeddingColumns);
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
  for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
    const std::int64_t c1 = std::min(dim, c0 + kEmbeddingColumns);
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

// Mixed precision. Gradient tables are summed as the f32 kernels sum them (rows in order, in
// f32, starting from the table's values when accumulating); a 16-bit table is rounded once per
// entry at the end rather than after every row, so its rows are grouped first.
namespace mixed {

void embedding_forward(const std::int32_t* tokens, std::int64_t rows, AnyPtr wte,
                       std::int64_t vocab_rows, AnyPtr out, std::int64_t dim,
                       std::int64_t vocab_begin) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = tokens[r] - vocab_begin;
    const AnyPtr o = out.at(r * dim);
    if (id >= 0 && id < vocab_rows)
      convert_n(wte.at(id * dim).data, wte.dtype, o.data, o.dtype, dim);
    else
      std::memset(o.data, 0, dim * size_of(o.dtype));  // all-zero bits are +0 in every type
  }
}

// `index` holds the rows grouped by token when dwte is not f32.
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, AnyPtr dout, AnyPtr dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin, GrowBuffer& index) {
  if (!accumulate) std::memset(dwte.data, 0, vocab_rows * dim * size_of(dwte.dtype));
  if (dwte.is_f32()) {  // the f32 kernel's scatter-add, dout staged a slice at a time
    float* table = dwte.f32();
#pragma omp parallel for schedule(static)
    for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
      const std::int64_t len = std::min(dim, c0 + kEmbeddingColumns) - c0;
      float staged[kEmbeddingColumns];
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t id = tokens[r] - vocab_begin;
        if (id < 0 || id >= vocab_rows) continue;
        const float* g = read_f32(dout.at(r * dim + c0), len, staged);
        float* w = table + id * dim + c0;
#pragma omp simd
        for (std::int64_t c = 0; c < len; ++c) w[c] += g[c];
      }
    }
    return;
  }
  // Counting sort of the rows by id, stable: id i's rows are order[start[i] .. start[i + 1]).
  auto* start = index.get_as<std::int64_t>(2 * vocab_rows + 1 + rows);
  std::int64_t* cursor = start + vocab_rows + 1;
  std::int64_t* order = cursor + vocab_rows;
  std::fill(start, start + vocab_rows + 1, 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = tokens[r] - vocab_begin;
    if (id >= 0 && id < vocab_rows) ++start[id + 1];
  }
  for (std::int64_t i = 0; i < vocab_rows; ++i) start[i + 1] += start[i];
  std::copy(start, start + vocab_rows, cursor);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = tokens[r] - vocab_begin;
    if (id >= 0 && id < vocab_rows) order[cursor[id]++] = r;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
    const std::int64_t len = std::min(dim, c0 + kEmbeddingColumns) - c0;
    float acc[kEmbeddingColumns], staged[kEmbeddingColumns];
    for (std::int64_t id = 0; id < vocab_rows; ++id) {
      const std::int64_t first = start[id], stop = start[id + 1];
      if (first == stop) continue;
      const AnyPtr w = dwte.at(id * dim + c0);
      for (std::int64_t c = 0; c < len; ++c) acc[c] = w.get(c);
      for (std::int64_t j = first; j < stop; ++j) {
        const float* g = read_f32(dout.at(order[j] * dim + c0), len, staged);
#pragma omp simd
        for (std::int64_t c = 0; c < len; ++c) acc[c] += g[c];
      }
      write_back(w, len, acc);
    }
  }
}

void position_embedding_forward(AnyPtr x, std::int64_t rows, AnyPtr wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
      const std::int64_t len = std::min(dim, c0 + kEmbeddingColumns) - c0;
      float xs[kEmbeddingColumns], ps[kEmbeddingColumns];
      const AnyPtr xr = x.at(r * dim + c0);
      float* o = out_f32(xr, len, xs, true);
      const float* p = read_f32(wpe.at(((first_row + r) % seq) * dim + c0), len, ps);
#pragma omp simd
      for (std::int64_t c = 0; c < len; ++c) o[c] += p[c];
      write_back(xr, len, o);
    }
  }
}

void position_embedding_backward(AnyPtr dx, std::int64_t rows, AnyPtr dwpe,
                                 std::int64_t position_rows, std::int64_t dim, std::int64_t seq,
                                 bool accumulate, std::int64_t first_row) {
  if (!accumulate) std::memset(dwpe.data, 0, position_rows * dim * size_of(dwpe.dtype));
  // Position p collects rows r = p - first_row (mod seq), then every seq rows after it.
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < dim; c0 += kEmbeddingColumns) {
    const std::int64_t len = std::min(dim, c0 + kEmbeddingColumns) - c0;
    float acc[kEmbeddingColumns], staged[kEmbeddingColumns];
    for (std::int64_t p = 0; p < std::min(seq, position_rows); ++p) {
      const std::int64_t r0 = ((p - first_row) % seq + seq) % seq;
      if (r0 >= rows) continue;
      float* a = out_f32(dwpe.at(p * dim + c0), len, acc, true);
      for (std::int64_t r = r0; r < rows; r += seq) {
        const float* g = read_f32(dx.at(r * dim + c0), len, staged);
#pragma omp simd
        for (std::int64_t c = 0; c < len; ++c) a[c] += g[c];
      }
      write_back(dwpe.at(p * dim + c0), len, a);
    }
  }
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_embedding_forward(const Tensor& token_ids, const Tensor& wte, const Tensor& out,
                                      std::int64_t vocab_begin) {
  const std::int32_t* tokens = ids(token_ids);
  const Kind kind = kind_of({&wte, &out});
  if (kind == Kind::mixed)
    return cpu::mixed::embedding_forward(tokens, rows_of(out), AnyPtr(wte), wte.shape[0],
                                         AnyPtr(out), cols_of(wte), vocab_begin);
  typed(kind, [&]<class T>() {
    cpu::embedding_forward(tokens, rows_of(out), wte.as<T>(), wte.shape[0], out.as<T>(),
                           cols_of(wte), vocab_begin);
  });
}

void CpuBackend::do_embedding_backward(const Tensor& token_ids, const Tensor& dout,
                                       const Tensor& dwte, bool accumulate,
                                       std::int64_t vocab_begin) {
  const std::int32_t* tokens = ids(token_ids);
  const Kind kind = kind_of({&dout, &dwte});
  if (kind == Kind::mixed)
    return cpu::mixed::embedding_backward(tokens, rows_of(dout), AnyPtr(dout), AnyPtr(dwte),
                                          dwte.shape[0], cols_of(dwte), accumulate, vocab_begin,
                                          index_);
  typed(kind, [&]<class T>() {
    cpu::embedding_backward(tokens, rows_of(dout), dout.as<T>(), dwte.as<T>(), dwte.shape[0],
                            cols_of(dwte), accumulate, vocab_begin);
  });
}

void CpuBackend::do_position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                               std::int64_t first_row) {
  const Kind kind = kind_of({&x, &wpe});
  if (kind == Kind::mixed)
    return cpu::mixed::position_embedding_forward(AnyPtr(x), rows_of(x), AnyPtr(wpe), cols_of(x),
                                                  seq, first_row);
  typed(kind, [&]<class T>() {
    cpu::position_embedding_forward(x.as<T>(), rows_of(x), wpe.as<T>(), cols_of(x), seq, first_row);
  });
}

void CpuBackend::do_position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                                std::int64_t seq, bool accumulate,
                                                std::int64_t first_row) {
  const Kind kind = kind_of({&dx, &dwpe});
  if (kind == Kind::mixed)
    return cpu::mixed::position_embedding_backward(AnyPtr(dx), rows_of(dx), AnyPtr(dwpe),
                                                   dwpe.shape[0], cols_of(dx), seq, accumulate,
                                                   first_row);
  typed(kind, [&]<class T>() {
    cpu::position_embedding_backward(dx.as<T>(), rows_of(dx), dwpe.as<T>(), dwpe.shape[0],
                                     cols_of(dx), seq, accumulate, first_row);
  });
}

}  // namespace kintsugi::cpu
