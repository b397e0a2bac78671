// LayerNorm over the last dimension. Forward keeps mean and 1/std per row so backward need
// not recompute them. Backward runs in two passes: rows in parallel for dx, then column slices
// in parallel for dw/db, so the parameter gradients are summed in row order, thread-count free.
// The row bodies below serve both the typed kernels and the mixed-precision ones (on rows
// staged in f32), so mixed precision computes exactly what f32 computes on the same values.
#include <algorithm>
#include <cmath>
#include <utility>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/norm_rows.hpp"

namespace kintsugi::cpu {

namespace {

constexpr std::int64_t kNormGradColumns = 128;  // columns per thread in the dw/db pass

// Normalizes one row into yr; returns {mean, 1/std}.
template <class T>
inline std::pair<T, T> forward_row(const T* xr, const T* w, const T* b, T* yr, std::int64_t cols,
                                   double eps) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t c = 0; c < cols; ++c) sum += xr[c];
  T mu = sum / T(cols);
  T var = 0;
#pragma omp simd reduction(+ : var)
  for (std::int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
  T rs = T(1) / std::sqrt(var / T(cols) + T(eps));
#pragma omp simd
  for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
  return {mu, rs};
}

// dxr += this row's input gradient.
template <class T>
inline void backward_row(const T* dyr, const T* xr, const T* w, T mu, T rs, T* dxr,
                         std::int64_t cols) {
  T sum_dn = 0, sum_dn_n = 0;  // sums of dnorm and dnorm * norm over the row
#pragma omp simd reduction(+ : sum_dn, sum_dn_n)
  for (std::int64_t c = 0; c < cols; ++c) {
    T dn = dyr[c] * w[c];
    sum_dn += dn;
    sum_dn_n += dn * (xr[c] - mu) * rs;
  }
  const T mean_dn = sum_dn / T(cols), mean_dn_n = sum_dn_n / T(cols);
#pragma omp simd
  for (std::int64_t c = 0; c < cols; ++c) {
    T norm = (xr[c] - mu) * rs;
    dxr[c] += rs * (dyr[c] * w[c] - mean_dn - norm * mean_dn_n);
  }
}

// One row's contribution to a slice of dw and db.
template <class T>
inline void param_grad_row(const T* dyr, const T* xr, T mu, T rs, T* acc_w, T* acc_b,
                           std::int64_t len) {
#pragma omp simd
  for (std::int64_t c = 0; c < len; ++c) {
    acc_w[c] += dyr[c] * (xr[c] - mu) * rs;
    acc_b[c] += dyr[c];
  }
}

}  // namespace

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                       std::int64_t rows, std::int64_t cols, double eps) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    std::tie(mean[r], rstd[r]) = forward_row(x + r * cols, w, b, y + r * cols, cols, eps);
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                        T* dw, T* db, std::int64_t rows, std::int64_t cols, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r)
    backward_row(dy + r * cols, x + r * cols, w, mean[r], rstd[r], dx + r * cols, cols);
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kNormGradColumns) {
    std::int64_t c1 = std::min(cols, c0 + kNormGradColumns);
    T acc_w[kNormGradColumns], acc_b[kNormGradColumns];
    for (std::int64_t c = c0; c < c1; ++c) {
      acc_w[c - c0] = accumulate ? dw[c] : T(0);
      acc_b[c - c0] = accumulate ? db[c] : T(0);
    }
    for (std::int64_t r = 0; r < rows; ++r)
      param_grad_row(dy + r * cols + c0, x + r * cols + c0, mean[r], rstd[r], acc_w, acc_b,
                     c1 - c0);
    for (std::int64_t c = c0; c < c1; ++c) {
      dw[c] = acc_w[c - c0];
      db[c] = acc_b[c - c0];
    }
  }
}

template void layernorm_forward<float>(const float*, const float*, const float*, float*, float*,
                                       float*, std::int64_t, std::int64_t, double);
template void layernorm_forward<double>(const double*, const double*, const double*, double*,
                                        double*, double*, std::int64_t, std::int64_t, double);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, float*, float*, float*, std::int64_t,
                                        std::int64_t, bool);
template void layernorm_backward<double>(const double*, const double*, const double*,
                                         const double*, const double*, double*, double*, double*,
                                         std::int64_t, std::int64_t, bool);

namespace mixed {

void layernorm_forward(AnyPtr x, AnyPtr w, AnyPtr b, AnyPtr y, AnyPtr mean, AnyPtr rstd,
                       std::int64_t rows, std::int64_t cols, double eps, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, 4 * cols, rows, [&](float* area) {
    const float* w32 = read_f32(w, cols, area);
    const float* b32 = read_f32(b, cols, area + cols);
    return [&, area, w32, b32](std::int64_t r) {
      const float* xr = read_f32(x.at(r * cols), cols, area + 2 * cols);
      float* yr = out_f32(y.at(r * cols), cols, area + 3 * cols, false);
      const auto [mu, rs] = forward_row(xr, w32, b32, yr, cols, eps);
      write_back(y.at(r * cols), cols, yr);
      mean.set(r, mu);
      rstd.set(r, rs);
    };
  });
}

void layernorm_backward(AnyPtr dy, AnyPtr x, AnyPtr w, AnyPtr mean, AnyPtr rstd, AnyPtr dx,
                        AnyPtr dw, AnyPtr db, std::int64_t rows, std::int64_t cols,
                        bool accumulate, ThreadWorkspace& ws) {
  norm_dx_rows(dy, x, w, dx, rows, cols, ws,
               [&](std::int64_t r, const float* dyr, const float* xr, const float* w32,
                   float* dxr) {
                 backward_row(dyr, xr, w32, mean.get(r), rstd.get(r), dxr, cols);
               });
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kNormGradColumns) {
    const std::int64_t len = std::min(cols, c0 + kNormGradColumns) - c0;
    float acc_w[kNormGradColumns], acc_b[kNormGradColumns], dy_s[kNormGradColumns], x_s[kNormGradColumns];
    for (std::int64_t c = 0; c < len; ++c) {
      acc_w[c] = accumulate ? dw.get(c0 + c) : 0.0f;
      acc_b[c] = accumulate ? db.get(c0 + c) : 0.0f;
    }
    for (std::int64_t r = 0; r < rows; ++r)
      param_grad_row(read_f32(dy.at(r * cols + c0), len, dy_s),
                     read_f32(x.at(r * cols + c0), len, x_s), mean.get(r), rstd.get(r), acc_w,
                     acc_b, len);
    for (std::int64_t c = 0; c < len; ++c) {
      dw.set(c0 + c, acc_w[c]);
      db.set(c0 + c, acc_b[c]);
    }
  }
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                      const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                      double eps) {
  const Kind kind = kind_of({&x, &w, &b, &y, &mean, &rstd});
  if (kind == Kind::mixed)
    return cpu::mixed::layernorm_forward(AnyPtr(x), AnyPtr(w), AnyPtr(b), AnyPtr(y), AnyPtr(mean),
                                         AnyPtr(rstd), rows_of(x), cols_of(x), eps, workspace_);
  typed(kind, [&]<class T>() {
    cpu::layernorm_forward(x.as<T>(), w.as<T>(), b.as<T>(), y.as<T>(), mean.as<T>(), rstd.as<T>(),
                           rows_of(x), cols_of(x), eps);
  });
}

void CpuBackend::do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                       const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                       const Tensor& dw, const Tensor& db, bool accumulate) {
  const Kind kind = kind_of({&dy, &x, &w, &mean, &rstd, &dx, &dw, &db});
  if (kind == Kind::mixed)
    return cpu::mixed::layernorm_backward(AnyPtr(dy), AnyPtr(x), AnyPtr(w), AnyPtr(mean),
                                          AnyPtr(rstd), AnyPtr(dx), AnyPtr(dw), AnyPtr(db),
                                          rows_of(x), cols_of(x), accumulate, workspace_);
  typed(kind, [&]<class T>() {
    cpu::layernorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), mean.as<T>(), rstd.as<T>(),
                            dx.as<T>(), dw.as<T>(), db.as<T>(), rows_of(x), cols_of(x), accumulate);
  });
}

}  // namespace kintsugi::cpu
