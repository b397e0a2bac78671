#pragma once
// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018): the loss is multiplied by
// a scale so that small activation gradients stay representable in fp16; a step whose
// gradient overflowed (inf/NaN) is skipped and the scale halved; after `window` clean steps
// the scale doubles. bf16 has f32's range and needs none (scale 1, never adjusted).
#include <cstdint>

namespace kintsugi {

class LossScaler {
 public:
  LossScaler() = default;  // disabled: scale 1
  LossScaler(double initial, std::int64_t window) : enabled_(true), scale_(initial), window_(window) {}

  double scale() const { return scale_; }
  bool enabled() const { return enabled_; }
  // Called with the gradient norm of the scaled loss; returns false when the step must be
  // skipped (overflow).
  bool update(double scaled_grad_norm);
  std::int64_t skipped() const { return skipped_; }

  // Everything update() depends on, for checkpoints: a resumed run doubles and halves the
  // scale at the same steps as one that never stopped.
  struct State {
    double scale = 1.0;
    std::int64_t clean = 0, skipped = 0;
  };
  State state() const { return {scale_, clean_, skipped_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    clean_ = s.clean;
    skipped_ = s.skipped;
  }

 private:
  bool enabled_ = false;
  double scale_ = 1.0;
  std::int64_t window_ = 1000, clean_ = 0, skipped_ = 0;
};

}  // namespace kintsugi
