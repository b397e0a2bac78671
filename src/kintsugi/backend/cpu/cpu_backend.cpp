// What CpuBackend's ops share (cpu_backend.hpp): the element-type checks. Each op's override
// is defined beside its kernels.
#include "kintsugi/backend/cpu/cpu_backend.hpp"

namespace kintsugi {

namespace cpu {

CpuBackend::Kind CpuBackend::kind_of(std::initializer_list<const Tensor*> tensors) {
  return kind_of(std::span<const Tensor* const>(tensors.begin(), tensors.size()));
}

CpuBackend::Kind CpuBackend::kind_of(std::span<const Tensor* const> tensors) {
  bool all_f32 = true, all_f64 = true, any_f64 = false;
  for (const Tensor* t : tensors) {
    if (!t) continue;
    all_f32 &= t->dtype == DType::f32;
    all_f64 &= t->dtype == DType::f64;
    any_f64 |= t->dtype == DType::f64;
    if (!is_float(t->dtype))
      fail("the CPU backend's float ops do not take {} tensors", name_of(t->dtype));
  }
  if (all_f32) return Kind::f32;
  if (all_f64) return Kind::f64;
  if (any_f64)
    fail("f64 tensors cannot be mixed with other types in one op (f64 serves gradient checks, "
         "where every tensor is f64)");
  return Kind::mixed;
}

CpuBackend::Kind CpuBackend::check_adamw(const Tensor& param, const Tensor& grad,
                                         const Tensor& m, const Tensor& v,
                                         const Tensor* working_copy) {
  const Kind kind = kind_of({&param, &grad, &m, &v, working_copy});
  if ((kind == Kind::mixed || working_copy) &&
      (param.dtype != DType::f32 || m.dtype != DType::f32 || v.dtype != DType::f32))
    fail("mixed-precision AdamW keeps param (the master copy), m and v in f32, not {}/{}/{}",
         name_of(param.dtype), name_of(m.dtype), name_of(v.dtype));
  return kind;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& memory) {
  return std::make_unique<cpu::CpuBackend>(memory);
}

}  // namespace kintsugi
