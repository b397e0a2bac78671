#include "kintsugi/optim/adamw.hpp"

namespace kintsugi {

AdamW::AdamW(Backend& backend, ParamStore& params, AdamWConfig config)
    : backend_(backend), params_(params), config_(config) {
  const std::size_t bytes = params.numel() * size_of(params.dtype());
  m_ = backend.allocate(MemoryKind::optimizer_state, bytes);
  v_ = backend.allocate(MemoryKind::optimizer_state, bytes);
  // Merge neighbouring parameters with the same decay setting; a run extends to the next
  // parameter's offset, so alignment gaps (always zero) ride along harmlessly.
  for (int i = 0; i < params.size(); ++i) {
    const auto& e = params.entry(i);
    const std::int64_t end = i + 1 < params.size() ? params.entry(i + 1).offset : params.numel();
    if (!runs_.empty() && runs_.back().decay == e.spec.weight_decay)
      runs_.back().count = end - runs_.back().offset;
    else
      runs_.push_back({e.offset, end - e.offset, e.spec.weight_decay});
  }
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  const DType dt = params_.dtype();
  const std::size_t es = size_of(dt);
  const Tensor p = params_.params(), g = params_.grads();
  for (const Run& r : runs_) {
    auto slice = [&](const Tensor& t) {
      return Tensor{static_cast<std::byte*>(t.data) + r.offset * es, dt, Shape{r.count}};
    };
    AdamWHyper h{.lr = lr,
                 .beta1 = config_.beta1,
                 .beta2 = config_.beta2,
                 .eps = config_.eps,
                 .weight_decay = r.decay ? config_.weight_decay : 0.0,
                 .grad_scale = grad_scale,
                 .step = steps_};
    backend_.adamw_step(slice(p), slice(g), slice(first_moment()), slice(second_moment()), h);
  }
}

Tensor AdamW::first_moment() const { return m_.view(params_.dtype(), Shape{params_.numel()}); }
Tensor AdamW::second_moment() const { return v_.view(params_.dtype(), Shape{params_.numel()}); }

}  // namespace kintsugi
