#include "kintsugi/optim/adamw.hpp"

namespace kintsugi {

AdamW::AdamW(Backend& backend, std::vector<AdamWSegment> segments, AdamWConfig config)
    : backend_(backend), segments_(std::move(segments)), config_(config) {
  for (const auto& s : segments_) total_ += s.param.numel();
  const DType dt = segments_.empty() ? DType::f32 : segments_.front().param.dtype;
  m_ = backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dt));
  v_ = backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dt));
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  std::int64_t offset = 0;
  for (const AdamWSegment& s : segments_) {
    const DType dt = s.param.dtype;
    const Shape shape{s.param.numel()};
    const Tensor m = m_.view(dt, shape, offset * size_of(dt));
    const Tensor v = v_.view(dt, shape, offset * size_of(dt));
    const AdamWHyper h{.lr = lr,
                       .beta1 = config_.beta1,
                       .beta2 = config_.beta2,
                       .eps = config_.eps,
                       .weight_decay = s.decay ? config_.weight_decay : 0.0,
                       .grad_scale = grad_scale,
                       .step = steps_};
    backend_.adamw_step(s.param, s.grad, m, v, h, s.working_copy.empty() ? nullptr : &s.working_copy);
    offset += s.param.numel();
  }
}

Tensor AdamW::moment(int which, std::int64_t offset, std::int64_t n) const {
  const DType dt = segments_.empty() ? DType::f32 : segments_.front().param.dtype;
  return (which == 0 ? m_ : v_).view(dt, Shape{n}, offset * size_of(dt));
}

void AdamW::refresh_working_copies() {
  for (const AdamWSegment& s : segments_)
    if (!s.working_copy.empty()) backend_.convert(s.param, s.working_copy);
}

}  // namespace kintsugi
