// Lion (backend.hpp, LionHyper): elementwise, so any split of the work gives the same bits.
#include "kintsugi/backend/cpu/lion.hpp"

#include <algorithm>

#include "kintsugi/backend/cpu/convert.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"

namespace kintsugi::cpu {

namespace {

constexpr std::int64_t kLionStage = 2048;  // mixed precision: gradient elements staged at a time

// Lion's constants in the arithmetic's type, from the hyperparameters once per call.
template <class T>
struct LionConstants {
  T b1, b2, gs, lr, decay;
  explicit LionConstants(const LionHyper& h)
      : b1(static_cast<T>(h.beta1)),
        b2(static_cast<T>(h.beta2)),
        gs(static_cast<T>(h.grad_scale)),
        lr(static_cast<T>(h.lr)),
        decay(static_cast<T>(1.0 - h.lr * h.weight_decay)) {}
};

template <class T>
inline void lion_element(T& param, T grad, T& m, const LionConstants<T>& k) {
  const T g = grad * k.gs;
  const T c = k.b1 * m + (T(1) - k.b1) * g;
  const T sign = static_cast<T>((c > T(0)) - (c < T(0)));  // sign(0) = 0
  param = param * k.decay - k.lr * sign;
  m = k.b2 * m + (T(1) - k.b2) * g;
}

}  // namespace

template <class T>
void lion_step(T* param, const T* grad, T* m, std::int64_t n, const LionHyper& h) {
  const LionConstants<T> k(h);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) lion_element(param[i], grad[i], m[i], k);
}
template void lion_step<float>(float*, const float*, float*, std::int64_t, const LionHyper&);
template void lion_step<double>(double*, const double*, double*, std::int64_t, const LionHyper&);

namespace mixed {

void lion_step(float* param, AnyPtr grad, float* m, const AnyPtr* working_copy, std::int64_t n,
               const LionHyper& h) {
  const LionConstants<float> k(h);
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kLionStage) {
    const std::int64_t len = std::min(kLionStage, n - i0);
    float gs[kLionStage];
    const float* g = read_f32(grad.at(i0), len, gs);
    float* p = param + i0;
    float* mc = m + i0;
#pragma omp simd
    for (std::int64_t i = 0; i < len; ++i) lion_element(p[i], g[i], mc[i], k);
    copy_to_working(working_copy, i0, p, len);
  }
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_lion_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                              const LionHyper& h, const Tensor* working_copy) {
  const std::int64_t n = param.numel();
  const Kind kind = kind_of({&param, &grad, &m, working_copy});
  if (kind == Kind::mixed || working_copy) {
    if (param.dtype != DType::f32 || m.dtype != DType::f32)
      fail("mixed-precision Lion keeps param (the master copy) and m in f32, not {}/{}",
           name_of(param.dtype), name_of(m.dtype));
    const OptionalAny wc(working_copy);
    return cpu::mixed::lion_step(param.as<float>(), AnyPtr(grad), m.as<float>(), wc.ptr, n, h);
  }
  typed(kind, [&]<class T>() { cpu::lion_step(param.as<T>(), grad.as<T>(), m.as<T>(), n, h); });
}

}  // namespace kintsugi::cpu
