#pragma once
// AdamW (Loshchilov & Hutter) over segments: contiguous ranges of parameters (whole or sharded)
// that share a weight-decay setting (none on biases and norm weights). Each segment names its
// weights (the f32 master copy under mixed precision), its gradient and, under mixed precision,
// the working copy to refresh. The first and second moments are one flat f32 buffer each,
// cut into the segments' lengths. A step updates every segment in one multi-range op
// (Backend::adamw_step_multi), or one op per segment with KINTSUGI_MULTI_TENSOR=0
// (multi_tensor.hpp).
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/optim/segment_optimizer.hpp"

namespace kintsugi {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

using AdamWSegment = OptimizerSegment;

class AdamW final : public SegmentOptimizer {
 public:
  // The moments have the segments' element type (f32, or f64 for gradient checks): moment 0 is
  // the first, 1 the second.
  AdamW(Backend& backend, const std::vector<AdamWSegment>& segments, AdamWConfig config);
  void step(double lr, double grad_scale) override;
  OptimizerKind kind() const override { return OptimizerKind::adamw; }

 private:
  std::vector<AdamWRange> ranges_;  // the segments with their moments
  AdamWConfig config_;
};

}  // namespace kintsugi
