// LayerNorm over the last dimension. Forward keeps mean and 1/std per row so backward need
// not recompute them. Backward runs in two passes: rows in parallel for dx, then column slices
// in parallel for dw/db, so the parameter gradients are summed in row order, thread-count free.
#include <algorithm>
#include <cmath>

#include "kintsugi/backend/cpu/kernels.hpp"

namespace kintsugi::cpu {

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                       std::int64_t rows, std::int64_t cols, double eps) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
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
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                        T* dw, T* db, std::int64_t rows, std::int64_t cols, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    T* dxr = dx + r * cols;
    const T mu = mean[r], rs = rstd[r];
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
  constexpr std::int64_t kSlice = 128;
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < cols; c0 += kSlice) {
    std::int64_t c1 = std::min(cols, c0 + kSlice);
    T acc_w[kSlice], acc_b[kSlice];
    for (std::int64_t c = c0; c < c1; ++c) {
      acc_w[c - c0] = accumulate ? dw[c] : T(0);
      acc_b[c - c0] = accumulate ? db[c] : T(0);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* dyr = dy + r * cols;
      const T* xr = x + r * cols;
      const T mu = mean[r], rs = rstd[r];
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) {
        acc_w[c - c0] += dyr[c] * (xr[c] - mu) * rs;
        acc_b[c - c0] += dyr[c];
      }
    }
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

}  // namespace kintsugi::cpu
