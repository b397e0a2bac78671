#include "kintsugi/optim/adamw.hpp"

#include "kintsugi/optim/multi_tensor.hpp"

namespace kintsugi {

AdamW::AdamW(Backend& backend, const std::vector<AdamWSegment>& segments, AdamWConfig config)
    : backend_(backend), config_(config) {
  for (const auto& s : segments) total_ += s.param.numel();
  dtype_ = segments.empty() ? DType::f32 : segments.front().param.dtype;
  m_ = backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dtype_));
  v_ = backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dtype_));
  std::int64_t offset = 0;
  for (const AdamWSegment& s : segments) {
    const std::int64_t n = s.param.numel();
    ranges_.push_back({.param = s.param,
                       .grad = s.grad,
                       .m = moment(0, offset, n),
                       .v = moment(1, offset, n),
                       .working_copy = s.working_copy,
                       .decay = s.decay});
    offset += n;
  }
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  const AdamWHyper h{.lr = lr,
                     .beta1 = config_.beta1,
                     .beta2 = config_.beta2,
                     .eps = config_.eps,
                     .weight_decay = config_.weight_decay,
                     .grad_scale = grad_scale,
                     .step = steps_};
  if (multi_tensor_ops()) return backend_.adamw_step_multi(ranges_, h);
  for (const AdamWRange& r : ranges_) {
    AdamWHyper hr = h;
    hr.weight_decay = r.decay ? config_.weight_decay : 0.0;
    backend_.adamw_step(r.param, r.grad, r.m, r.v, hr,
                        r.working_copy.empty() ? nullptr : &r.working_copy);
  }
}

Tensor AdamW::moment(int which, std::int64_t offset, std::int64_t n) const {
  return (which == 0 ? m_ : v_).view(dtype_, Shape{n}, offset * size_of(dtype_));
}

void AdamW::refresh_working_copies() {
  for (const AdamWRange& r : ranges_)
    if (!r.working_copy.empty()) backend_.convert(r.param, r.working_copy);
}

}  // namespace kintsugi
