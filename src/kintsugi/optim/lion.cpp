#include "kintsugi/optim/lion.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

Lion::Lion(Backend& backend, const std::vector<OptimizerSegment>& segments,
           OptimizerConfig config)
    : backend_(backend), config_(config) {
  for (const auto& s : segments) total_ += s.param.numel();
  dtype_ = segments.empty() ? DType::f32 : segments.front().param.dtype;
  m_ = backend.allocate(MemoryKind::optimizer_state, total_ * size_of(dtype_));
  std::int64_t offset = 0;
  for (const OptimizerSegment& s : segments) {
    const std::int64_t n = s.param.numel();
    ranges_.push_back({.segment = s, .m = moment(0, offset, n)});
    offset += n;
  }
}

void Lion::step(double lr, double grad_scale) {
  ++steps_;
  for (const Range& r : ranges_) {
    const LionHyper h{.lr = lr,
                      .beta1 = config_.beta1,
                      .beta2 = config_.beta2,
                      .weight_decay = r.segment.decay ? config_.weight_decay : 0.0,
                      .grad_scale = grad_scale};
    const Tensor& copy = r.segment.working_copy;
    backend_.lion_step(r.segment.param, r.segment.grad, r.m, h, copy.empty() ? nullptr : &copy);
  }
}

Tensor Lion::moment(int which, std::int64_t offset, std::int64_t n) const {
  KINTSUGI_ASSERT(which == 0);
  return m_.view(dtype_, Shape{n}, offset * size_of(dtype_));
}

void Lion::refresh_working_copies() {
  for (const Range& r : ranges_)
    if (!r.segment.working_copy.empty()) backend_.convert(r.segment.param, r.segment.working_copy);
}

}  // namespace kintsugi
