// Linear layers as GEMMs with weights stored [out, in]:
//   forward  y  = x . w^T   (NT)     backward dx = dy . w   (NN)     dw = dy^T . x   (TN)
// f32/f64 run OpenBLAS directly; mixed precision goes through gemm_mixed (bf16 or f32 product).
#include <algorithm>
#include <cstring>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

// out[c] (+)= sum over rows r of in[r, c]
template <class T>
void column_sums(const T* in, T* out, std::int64_t rows, std::int64_t cols, bool accumulate) {
  // Each thread owns a slice of columns and walks all rows: no races, and the summation order
  // is the row order whatever the thread count.
  constexpr std::int64_t kSlice = 256;
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kSlice) {
    std::int64_t c1 = std::min(cols, c0 + kSlice);
    T acc[kSlice];
    for (std::int64_t c = c0; c < c1; ++c) acc[c - c0] = accumulate ? out[c] : T(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * cols;
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (std::int64_t c = c0; c < c1; ++c) out[c] = acc[c - c0];
  }
}

template <class T>
void linear_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t m, std::int64_t n,
                    std::int64_t k, bool accumulate) {
  gemm(false, true, m, n, k, T(1), x, k, w, k, accumulate ? T(1) : T(0), y, n);
  if (bias) add_bias(y, bias, m, n);
}

template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate) {
  gemm(false, false, m, k, n, T(1), dy, n, w, k, accumulate ? T(1) : T(0), dx, k);
}

template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dw, T* db, std::int64_t m,
                            std::int64_t n, std::int64_t k, bool accumulate) {
  gemm(true, false, n, k, m, T(1), dy, n, x, k, accumulate ? T(1) : T(0), dw, k);
  if (db) column_sums(dy, db, m, n, accumulate);
}

#define KINTSUGI_INSTANTIATE(T)                                                                \
  template void column_sums<T>(const T*, T*, std::int64_t, std::int64_t, bool);                \
  template void linear_forward<T>(const T*, const T*, const T*, T*, std::int64_t, std::int64_t, \
                                  std::int64_t, bool);                                         \
  template void linear_backward_input<T>(const T*, const T*, T*, std::int64_t, std::int64_t,    \
                                         std::int64_t, bool);                                  \
  template void linear_backward_weight<T>(const T*, const T*, T*, T*, std::int64_t,             \
                                          std::int64_t, std::int64_t, bool);
KINTSUGI_INSTANTIATE(float)
KINTSUGI_INSTANTIATE(double)
#undef KINTSUGI_INSTANTIATE

namespace mixed {

void column_sums(AnyPtr in, AnyPtr out, std::int64_t rows, std::int64_t cols, bool accumulate) {
  // As the f32 kernel: column slices per thread, rows summed in order in f32.
  constexpr std::int64_t kSlice = 256;
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kSlice) {
    const std::int64_t len = std::min(cols, c0 + kSlice) - c0;
    float acc[kSlice], staged[kSlice];
    for (std::int64_t c = 0; c < len; ++c) acc[c] = accumulate ? out.get(c0 + c) : 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = read_f32(in.at(r * cols + c0), len, staged);
#pragma omp simd
      for (std::int64_t c = 0; c < len; ++c) acc[c] += row[c];
    }
    for (std::int64_t c = 0; c < len; ++c) out.set(c0 + c, acc[c]);
  }
}

void linear_forward(AnyPtr x, AnyPtr w, const AnyPtr* bias, AnyPtr y, std::int64_t m,
                    std::int64_t n, std::int64_t k, bool accumulate, GemmWorkspace& ws) {
  gemm_mixed(m, n, k, {x, k, false}, {w, k, true}, y, n, accumulate, bias, ws);
}

void linear_backward_input(AnyPtr dy, AnyPtr w, AnyPtr dx, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate, GemmWorkspace& ws) {
  gemm_mixed(m, k, n, {dy, n, false}, {w, k, false}, dx, k, accumulate, nullptr, ws);
}

void linear_backward_weight(AnyPtr dy, AnyPtr x, AnyPtr dw, const AnyPtr* db, std::int64_t m,
                            std::int64_t n, std::int64_t k, bool accumulate, GemmWorkspace& ws) {
  gemm_mixed(n, k, m, {dy, n, true}, {x, k, false}, dw, k, accumulate, nullptr, ws);
  if (db) column_sums(dy, *db, m, n, accumulate);
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                   const Tensor& y, bool accumulate) {
  const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
  const Kind kind = kind_of({&x, &w, bias, &y});
  if (kind == Kind::mixed) {
    const OptionalAny b(bias);
    return cpu::mixed::linear_forward(AnyPtr(x), AnyPtr(w), b.ptr, AnyPtr(y), m, n, k, accumulate,
                                      gemm_);
  }
  typed(kind, [&]<class T>() {
    cpu::linear_forward(x.as<T>(), w.as<T>(), ptr<T>(bias), y.as<T>(), m, n, k, accumulate);
  });
}

void CpuBackend::do_linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                          bool accumulate) {
  const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
  const Kind kind = kind_of({&dy, &w, &dx});
  if (kind == Kind::mixed)
    return cpu::mixed::linear_backward_input(AnyPtr(dy), AnyPtr(w), AnyPtr(dx), m, n, k, accumulate,
                                             gemm_);
  typed(kind, [&]<class T>() {
    cpu::linear_backward_input(dy.as<T>(), w.as<T>(), dx.as<T>(), m, n, k, accumulate);
  });
}

void CpuBackend::do_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                           const Tensor* db, bool accumulate) {
  const std::int64_t m = rows_of(dy), n = cols_of(dy), k = cols_of(x);
  const Kind kind = kind_of({&dy, &x, &dw, db});
  if (kind == Kind::mixed) {
    const OptionalAny b(db);
    return cpu::mixed::linear_backward_weight(AnyPtr(dy), AnyPtr(x), AnyPtr(dw), b.ptr, m, n, k,
                                              accumulate, gemm_);
  }
  typed(kind, [&]<class T>() {
    cpu::linear_backward_weight(dy.as<T>(), x.as<T>(), dw.as<T>(), ptr<T>(db), m, n, k, accumulate);
  });
}

}  // namespace kintsugi::cpu
