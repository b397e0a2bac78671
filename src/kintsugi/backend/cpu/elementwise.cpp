// Elementwise ops, reductions and the fused AdamW update over flat buffers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kintsugi/backend/cpu/kernels.hpp"

namespace kintsugi::cpu {

template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void add_bias(T* x, const T* bias, std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = x + r * cols;
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

template <class T>
void scale(T* x, std::int64_t n, double factor) {
  const T f = static_cast<T>(factor);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) x[i] *= f;
}

template <class T>
double sum_squares(const T* x, std::int64_t n) {
  // Fixed-size chunks summed in chunk order: the result does not depend on the thread count.
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const T* p = x + c * kChunk;
    const std::int64_t len = std::min(kChunk, n - c * kChunk);
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (std::int64_t i = 0; i < len; ++i) acc += p[i] * p[i];
    partial[c] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <class T>
void adamw_step(T* param, const T* grad, T* m, T* v, std::int64_t n, const AdamWHyper& h) {
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T gs = static_cast<T>(h.grad_scale), eps = static_cast<T>(h.eps);
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const T step_size = static_cast<T>(h.lr / (1.0 - std::pow(h.beta1, double(h.step))));
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, double(h.step))));
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

#define KINTSUGI_INSTANTIATE(T)                                           \
  template void add<T>(const T*, const T*, T*, std::int64_t);             \
  template void add_bias<T>(T*, const T*, std::int64_t, std::int64_t);    \
  template void scale<T>(T*, std::int64_t, double);                       \
  template double sum_squares<T>(const T*, std::int64_t);                 \
  template void adamw_step<T>(T*, const T*, T*, T*, std::int64_t, const AdamWHyper&);
KINTSUGI_INSTANTIATE(float)
KINTSUGI_INSTANTIATE(double)
#undef KINTSUGI_INSTANTIATE

}  // namespace kintsugi::cpu
