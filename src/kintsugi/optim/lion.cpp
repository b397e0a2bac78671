#include "kintsugi/optim/lion.hpp"

namespace kintsugi {

Lion::Lion(Backend& backend, const std::vector<OptimizerSegment>& segments,
           OptimizerConfig config)
    : SegmentOptimizer(backend, segments, 1), config_(config) {
  for (std::size_t i = 0; i < segments.size(); ++i) m_.push_back(segment_moment(0, i));
}

void Lion::step(double lr, double grad_scale) {
  ++steps_;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const OptimizerSegment& s = segments_[i];
    const LionHyper h{.lr = lr,
                      .beta1 = config_.beta1,
                      .beta2 = config_.beta2,
                      .weight_decay = s.decay ? config_.weight_decay : 0.0,
                      .grad_scale = grad_scale};
    const Tensor& copy = s.working_copy;
    backend_.lion_step(s.param, s.grad, m_[i], h, copy.empty() ? nullptr : &copy);
  }
}

}  // namespace kintsugi
