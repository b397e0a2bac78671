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

namespace kintsugi {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct AdamWSegment {
  Tensor param;         // updated in place
  Tensor grad;
  Tensor working_copy;  // empty, or the low-precision weights to write after the update
  bool decay = false;
};

class AdamW {
 public:
  // The moments have the segments' element type (f32, or f64 for gradient checks).
  AdamW(Backend& backend, const std::vector<AdamWSegment>& segments, AdamWConfig config);
  // One update with learning rate lr; gradients are multiplied by grad_scale first (clipping,
  // loss-scale removal).
  void step(double lr, double grad_scale);
  std::int64_t steps_taken() const { return steps_; }
  std::int64_t numel() const { return total_; }

  // Checkpoints. The first (which = 0) or second (1) moment of elements [offset, offset + n)
  // of the state, counted across the segments in order.
  Tensor moment(int which, std::int64_t offset, std::int64_t n) const;
  // Resuming: the bias correction continues from the saved step count, and the working copies
  // are rounded again from the restored weights (as step() would have left them).
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  void refresh_working_copies();

 private:
  Backend& backend_;
  std::vector<AdamWRange> ranges_;  // the segments with their moments
  AdamWConfig config_;
  DType dtype_ = DType::f32;  // of the weights and moments
  std::int64_t total_ = 0;
  Buffer m_, v_;
  std::int64_t steps_ = 0;
};

}  // namespace kintsugi
