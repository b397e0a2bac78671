// GELU with the tanh approximation (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Backward recomputes the tanh from x instead of saving it.
#include <cmath>
#include <numbers>

#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu {

namespace {
template <class T>
constexpr T kSqrt2OverPi = static_cast<T>(0.79788456080286535588);  // sqrt(2/pi)
template <class T>
constexpr T kCubic = static_cast<T>(0.044715);
}  // namespace

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    T v = x[i];
    T t = tanh_fast(kSqrt2OverPi<T> * (v + kCubic<T> * v * v * v));
    y[i] = T(0.5) * v * (T(1) + t);
  }
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    T v = x[i];
    T u = kSqrt2OverPi<T> * (v + kCubic<T> * v * v * v);
    T t = tanh_fast(u);
    T du = kSqrt2OverPi<T> * (T(1) + T(3) * kCubic<T> * v * v);
    T grad = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du;
    dx[i] = dy[i] * grad;
  }
}

template void gelu_forward<float>(const float*, float*, std::int64_t);
template void gelu_forward<double>(const double*, double*, std::int64_t);
template void gelu_backward<float>(const float*, const float*, float*, std::int64_t);
template void gelu_backward<double>(const double*, const double*, double*, std::int64_t);

}  // namespace kintsugi::cpu
