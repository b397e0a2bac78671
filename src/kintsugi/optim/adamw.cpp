#include "kintsugi/optim/adamw.hpp"

#include "kintsugi/optim/multi_tensor.hpp"

namespace kintsugi {

AdamW::AdamW(Backend& backend, const std::vector<AdamWSegment>& segments, AdamWConfig config)
    : SegmentOptimizer(backend, segments, 2), config_(config) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const AdamWSegment& s = segments[i];
    ranges_.push_back({.param = s.param,
                       .grad = s.grad,
                       .m = segment_moment(0, i),
                       .v = segment_moment(1, i),
                       .working_copy = s.working_copy,
                       .decay = s.decay});
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

}  // namespace kintsugi
