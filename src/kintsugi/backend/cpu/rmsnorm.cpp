// RMSNorm over the last dimension (Llama): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
// Same structure as layernorm.cpp: forward keeps rstd per row; backward computes dx with rows in
// parallel, then dw with column slices in parallel, summing rows in order (thread-count free).
// The row bodies serve the typed and the mixed-precision kernels alike.
#include <algorithm>
#include <cmath>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/norm_rows.hpp"

namespace kintsugi::cpu {

namespace {

constexpr std::int64_t kSlice = 128;  // columns per thread in the dw pass

template <class T>
inline T forward_row(const T* xr, const T* w, T* yr, std::int64_t cols, double eps) {
  T sq = 0;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
  const T rs = T(1) / std::sqrt(sq / T(cols) + T(eps));
#pragma omp simd
  for (std::int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * w[c];
  return rs;
}

// dxr += rs * (dn - n * mean(dn * n)) with n = x * rs and dn = dy * w.
template <class T>
inline void backward_row(const T* dyr, const T* xr, const T* w, T rs, T* dxr, std::int64_t cols) {
  T sum_dn_n = 0;
#pragma omp simd reduction(+ : sum_dn_n)
  for (std::int64_t c = 0; c < cols; ++c) sum_dn_n += dyr[c] * w[c] * xr[c] * rs;
  const T mean_dn_n = sum_dn_n / T(cols);
#pragma omp simd
  for (std::int64_t c = 0; c < cols; ++c)
    dxr[c] += rs * (dyr[c] * w[c] - xr[c] * rs * mean_dn_n);
}

template <class T>
inline void param_grad_row(const T* dyr, const T* xr, T rs, T* acc_w, std::int64_t len) {
#pragma omp simd
  for (std::int64_t c = 0; c < len; ++c) acc_w[c] += dyr[c] * xr[c] * rs;
}

}  // namespace

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t cols,
                     double eps) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    rstd[r] = forward_row(x + r * cols, w, y + r * cols, cols, eps);
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t cols, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    backward_row(dy + r * cols, x + r * cols, w, rstd[r], dx + r * cols, cols);
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kSlice) {
    const std::int64_t c1 = std::min(cols, c0 + kSlice);
    T acc_w[kSlice];
    for (std::int64_t c = c0; c < c1; ++c) acc_w[c - c0] = accumulate ? dw[c] : T(0);
    for (std::int64_t r = 0; r < rows; ++r)
      param_grad_row(dy + r * cols + c0, x + r * cols + c0, rstd[r], acc_w, c1 - c0);
    for (std::int64_t c = c0; c < c1; ++c) dw[c] = acc_w[c - c0];
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t,
                                     std::int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*,
                                      std::int64_t, std::int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, std::int64_t, std::int64_t, bool);
template void rmsnorm_backward<double>(const double*, const double*, const double*,
                                       const double*, double*, double*, std::int64_t,
                                       std::int64_t, bool);

namespace mixed {

void rmsnorm_forward(AnyPtr x, AnyPtr w, AnyPtr y, AnyPtr rstd, std::int64_t rows,
                     std::int64_t cols, double eps, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, 3 * cols, rows, [&](float* area) {
    const float* w32 = read_f32(w, cols, area);
    return [&, area, w32](std::int64_t r) {
      const float* xr = read_f32(x.at(r * cols), cols, area + cols);
      float* yr = out_f32(y.at(r * cols), cols, area + 2 * cols, false);
      rstd.set(r, forward_row(xr, w32, yr, cols, eps));
      write_back(y.at(r * cols), cols, yr);
    };
  });
}

void rmsnorm_backward(AnyPtr dy, AnyPtr x, AnyPtr w, AnyPtr rstd, AnyPtr dx, AnyPtr dw,
                      std::int64_t rows, std::int64_t cols, bool accumulate,
                      ThreadWorkspace& ws) {
  norm_dx_rows(dy, x, w, dx, rows, cols, ws,
               [&](std::int64_t r, const float* dyr, const float* xr, const float* w32,
                   float* dxr) { backward_row(dyr, xr, w32, rstd.get(r), dxr, cols); });
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kSlice) {
    const std::int64_t len = std::min(cols, c0 + kSlice) - c0;
    float acc_w[kSlice], dy_s[kSlice], x_s[kSlice];
    for (std::int64_t c = 0; c < len; ++c) acc_w[c] = accumulate ? dw.get(c0 + c) : 0.0f;
    for (std::int64_t r = 0; r < rows; ++r)
      param_grad_row(read_f32(dy.at(r * cols + c0), len, dy_s),
                     read_f32(x.at(r * cols + c0), len, x_s), rstd.get(r), acc_w, len);
    for (std::int64_t c = 0; c < len; ++c) dw.set(c0 + c, acc_w[c]);
  }
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                    const Tensor& rstd, double eps) {
  const Kind kind = kind_of({&x, &w, &y, &rstd});
  if (kind == Kind::mixed)
    return cpu::mixed::rmsnorm_forward(AnyPtr(x), AnyPtr(w), AnyPtr(y), AnyPtr(rstd), rows_of(x),
                                       cols_of(x), eps, workspace_);
  typed(kind, [&]<class T>() {
    cpu::rmsnorm_forward(x.as<T>(), w.as<T>(), y.as<T>(), rstd.as<T>(), rows_of(x), cols_of(x),
                         eps);
  });
}

void CpuBackend::do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                     const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                     bool accumulate) {
  const Kind kind = kind_of({&dy, &x, &w, &rstd, &dx, &dw});
  if (kind == Kind::mixed)
    return cpu::mixed::rmsnorm_backward(AnyPtr(dy), AnyPtr(x), AnyPtr(w), AnyPtr(rstd), AnyPtr(dx),
                                        AnyPtr(dw), rows_of(x), cols_of(x), accumulate, workspace_);
  typed(kind, [&]<class T>() {
    cpu::rmsnorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), rstd.as<T>(), dx.as<T>(), dw.as<T>(),
                          rows_of(x), cols_of(x), accumulate);
  });
}

}  // namespace kintsugi::cpu
