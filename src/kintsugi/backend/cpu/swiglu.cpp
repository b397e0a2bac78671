// SwiGLU (Llama's MLP activation): y = silu(gate) * up with silu(g) = g * sigmoid(g).
// Backward recomputes the sigmoid from gate instead of saving it:
//   dup   = dy * silu(g)
//   dgate = dy * up * sigmoid(g) * (1 + g * (1 - sigmoid(g)))
#include <algorithm>
#include <cmath>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu {

namespace {

template <class T>
inline T sigmoid(T g) {
  return T(1) / (T(1) + exp_fast(-g));
}

// Mixed precision: chunks staged in f32 on the stack (5 x 8 KiB).
constexpr std::int64_t kSwigluChunk = 2048;

template <class T>
inline void forward_body(const T* g, const T* u, T* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = g[i] * sigmoid(g[i]) * u[i];
}

// dgate may alias dy: element i of dy is read before element i of dgate is written.
template <class T>
inline void backward_body(const T* g, const T* u, const T* dy, T* dg, T* du, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T s = sigmoid(g[i]), d = dy[i];
    du[i] = d * g[i] * s;
    dg[i] = d * u[i] * s * (T(1) + g[i] * (T(1) - s));
  }
}

}  // namespace

template <class T>
void swiglu_forward(const T* gate, const T* up, T* y, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kSwigluChunk)
    forward_body(gate + i0, up + i0, y + i0, std::min(kSwigluChunk, n - i0));
}

template <class T>
void swiglu_backward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kSwigluChunk)
    backward_body(gate + i0, up + i0, dy + i0, dgate + i0, dup + i0, std::min(kSwigluChunk, n - i0));
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*,
                                      double*, std::int64_t);

namespace mixed {

void swiglu_forward(AnyPtr gate, AnyPtr up, AnyPtr y, std::int64_t n) {
  binary_in_chunks<kSwigluChunk>(gate, up, y, n, forward_body<float>);
}

void swiglu_backward(AnyPtr gate, AnyPtr up, AnyPtr dy, AnyPtr dgate, AnyPtr dup,
                     std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kSwigluChunk) {
    const std::int64_t len = std::min(kSwigluChunk, n - i0);
    float gs[kSwigluChunk], us[kSwigluChunk], dys[kSwigluChunk], dgs[kSwigluChunk], dus[kSwigluChunk];
    const float* g = read_f32(gate.at(i0), len, gs);
    const float* u = read_f32(up.at(i0), len, us);
    // dy is staged (copied when it is not f32) before dgate, which may alias it, is written.
    const float* d = read_f32(dy.at(i0), len, dys);
    float* dgc = out_f32(dgate.at(i0), len, dgs, false);
    float* duc = out_f32(dup.at(i0), len, dus, false);
    backward_body(g, u, d, dgc, duc, len);
    write_back(dgate.at(i0), len, dgc);
    write_back(dup.at(i0), len, duc);
  }
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  const Kind kind = kind_of({&gate, &up, &y});
  if (kind == Kind::mixed)
    return cpu::mixed::swiglu_forward(AnyPtr(gate), AnyPtr(up), AnyPtr(y), y.numel());
  typed(kind,
        [&]<class T>() { cpu::swiglu_forward(gate.as<T>(), up.as<T>(), y.as<T>(), y.numel()); });
}

void CpuBackend::do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                                    const Tensor& dgate, const Tensor& dup) {
  const std::int64_t n = gate.numel();
  const Kind kind = kind_of({&gate, &up, &dy, &dgate, &dup});
  if (kind == Kind::mixed)
    return cpu::mixed::swiglu_backward(AnyPtr(gate), AnyPtr(up), AnyPtr(dy), AnyPtr(dgate),
                                       AnyPtr(dup), n);
  typed(kind, [&]<class T>() {
    cpu::swiglu_backward(gate.as<T>(), up.as<T>(), dy.as<T>(), dgate.as<T>(), dup.as<T>(), n);
  });
}

}  // namespace kintsugi::cpu
