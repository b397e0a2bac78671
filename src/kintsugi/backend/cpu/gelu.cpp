// GELU with the tanh approximation (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Backward recomputes the tanh from x instead of saving it.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

namespace {
template <class T>
constexpr T kSqrt2OverPi = static_cast<T>(0.79788456080286535588);  // sqrt(2/pi)
template <class T>
constexpr T kCubic = static_cast<T>(0.044715);

// Elementwise bodies shared by the typed and the mixed-precision kernels.
template <class T>
inline T gelu(T v) {
  T t = tanh_fast(kSqrt2OverPi<T> * (v + kCubic<T> * v * v * v));
  return T(0.5) * v * (T(1) + t);
}
template <class T>
inline T gelu_grad(T v, T dy) {
  T u = kSqrt2OverPi<T> * (v + kCubic<T> * v * v * v);
  T t = tanh_fast(u);
  T du = kSqrt2OverPi<T> * (T(1) + T(3) * kCubic<T> * v * v);
  T grad = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du;
  return dy * grad;
}

// Mixed precision: chunks staged in f32 on the stack (3 x 8 KiB).
constexpr std::int64_t kChunk = 2048;
}  // namespace

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) dx[i] = gelu_grad(x[i], dy[i]);
}

template void gelu_forward<float>(const float*, float*, std::int64_t);
template void gelu_forward<double>(const double*, double*, std::int64_t);
template void gelu_backward<float>(const float*, const float*, float*, std::int64_t);
template void gelu_backward<double>(const double*, const double*, double*, std::int64_t);

namespace mixed {

void gelu_forward(AnyPtr x, AnyPtr y, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t len = std::min(kChunk, n - i0);
    float xs[kChunk], ys[kChunk];
    const float* xc = read_f32(x.at(i0), len, xs);
    float* yc = out_f32(y.at(i0), len, ys, false);
#pragma omp simd
    for (std::int64_t i = 0; i < len; ++i) yc[i] = gelu(xc[i]);
    write_back(y.at(i0), len, yc);
  }
}

void gelu_backward(AnyPtr x, AnyPtr dy, AnyPtr dx, std::int64_t n) {
  // dx may alias dy: each chunk reads dy before its results are written back.
  binary_in_chunks<kChunk>(x, dy, dx, n,
                           [](const float* xc, const float* dyc, float* dxc, std::int64_t len) {
#pragma omp simd
                             for (std::int64_t i = 0; i < len; ++i)
                               dxc[i] = gelu_grad(xc[i], dyc[i]);
                           });
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_gelu_forward(const Tensor& x, const Tensor& y) {
  const Kind kind = kind_of({&x, &y});
  if (kind == Kind::mixed) return cpu::mixed::gelu_forward(AnyPtr(x), AnyPtr(y), x.numel());
  typed(kind, [&]<class T>() { cpu::gelu_forward(x.as<T>(), y.as<T>(), x.numel()); });
}

void CpuBackend::do_gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const Kind kind = kind_of({&x, &dy, &dx});
  if (kind == Kind::mixed)
    return cpu::mixed::gelu_backward(AnyPtr(x), AnyPtr(dy), AnyPtr(dx), x.numel());
  typed(kind, [&]<class T>() { cpu::gelu_backward(x.as<T>(), dy.as<T>(), dx.as<T>(), x.numel()); });
}

// The MLP's GEMMs with GELU: the unfused ops in sequence, so that the CPU stays the oracle the
// fused GPU epilogues are checked against and computes exactly what the separate ops compute.
void CpuBackend::do_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                        const Tensor& pre, const Tensor& y) {
  do_linear_forward(x, w, bias, pre, false);
  do_gelu_forward(pre, y);
}

void CpuBackend::do_linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                               const Tensor& dx) {
  do_linear_backward_input(dy, w, dx, false);
  do_gelu_backward(pre, dx, dx);  // in place: gelu_backward lets dx alias dy
}

}  // namespace kintsugi::cpu
