#include "kintsugi/optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

namespace kintsugi {

bool LossScaler::update(double scaled_grad_norm) {
  if (!enabled_) return std::isfinite(scaled_grad_norm);
  if (!std::isfinite(scaled_grad_norm)) {
    scale_ = std::max(1.0, scale_ / 2);
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= window_) {
    scale_ *= 2;
    clean_ = 0;
  }
  return true;
}

}  // namespace kintsugi
