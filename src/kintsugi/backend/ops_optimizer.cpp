// The optimizer steps' entry points (backend.hpp): AdamW (one range or many) and Lion check
// their lengths and count their bytes once, then run the device backend's implementation. The
// element types a step takes are the implementation's to check: its kernels decide them.
#include <initializer_list>

#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
// Every tensor of a step as long as param.
void check_lengths(const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others) KINTSUGI_ASSERT(!t || t->numel() == param.numel());
}
// param, m and v read and written; grad read; the working copy written.
double adamw_bytes(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor* working_copy) {
  return 2 * (bytes(param) + bytes(m) + bytes(v)) + bytes(grad) + bytes(working_copy);
}
// Lion: param and m read and written; grad read; the working copy written.
double lion_bytes(const Tensor& param, const Tensor& grad, const Tensor& m,
                  const Tensor* working_copy) {
  return 2 * (bytes(param) + bytes(m)) + bytes(grad) + bytes(working_copy);
}
}  // namespace

void Backend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const Tensor* working_copy) {
  check_lengths(param, {&grad, &m, &v, working_copy});
  dispatch(op_call("adamw", 0, adamw_bytes(param, grad, m, v, working_copy), param),
           [&] { device_.do_adamw_step(param, grad, m, v, h, working_copy); });
}

// One call of its own kind over every range (ops_elementwise.cpp, sum_squares_multi).
void Backend::adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) {
  double moved = 0;
  std::int64_t n = 0;
  for (const AdamWRange& r : ranges) {
    const Tensor* copy = r.working_copy.empty() ? nullptr : &r.working_copy;
    check_lengths(r.param, {&r.grad, &r.m, &r.v, copy});
    moved += adamw_bytes(r.param, r.grad, r.m, r.v, copy);
    n += r.param.numel();
  }
  const DType dtype = ranges.empty() ? DType::f32 : ranges.front().param.dtype;
  dispatch(OpCall{"adamw_multi", 0, moved, Shape{n}, dtype},
           [&] { device_.do_adamw_step_multi(ranges, h); });
}

void Backend::lion_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const Tensor* working_copy) {
  check_lengths(param, {&grad, &m, working_copy});
  dispatch(op_call("lion", 0, lion_bytes(param, grad, m, working_copy), param),
           [&] { device_.do_lion_step(param, grad, m, h, working_copy); });
}

}  // namespace kintsugi
