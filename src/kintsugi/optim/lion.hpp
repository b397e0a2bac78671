#pragma once
// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") over segments, with
// decoupled weight decay as AdamW's (none on biases and norm weights):
//
//   c = beta1 m + (1 - beta1) g;  w = w (1 - lr wd) - lr sign(c);  m = beta2 m + (1 - beta2) g
//
// One moment (one flat buffer of the segments' element type, cut into their lengths) against
// AdamW's two: 4 bytes less optimizer state per weight, so 12 bytes per weight with mixed
// precision's f32 master copy instead of 16 (docs/config.md says when to choose it). Every
// update element is +-lr (or 0), so Lion wants a learning rate 3-10x below AdamW's and a weight
// decay as many times larger (the paper's advice). One Backend::lion_step per segment.
#include <vector>

#include "kintsugi/optim/segment_optimizer.hpp"

namespace kintsugi {

class Lion final : public SegmentOptimizer {
 public:
  Lion(Backend& backend, const std::vector<OptimizerSegment>& segments, OptimizerConfig config);
  void step(double lr, double grad_scale) override;
  OptimizerKind kind() const override { return OptimizerKind::lion; }

 private:
  std::vector<Tensor> m_;  // each segment's moment
  OptimizerConfig config_;
};

}  // namespace kintsugi
