#include "kintsugi/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kintsugi {

std::int64_t LrSchedule::decay_start() const {
  if (shape != LrShape::wsd) return decay_steps;
  const auto decaying = static_cast<std::int64_t>(
      std::llround(decay_fraction * static_cast<double>(decay_steps)));
  return std::max(warmup_steps, decay_steps - decaying);
}

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / warmup_steps;
  switch (shape) {
    case LrShape::constant:
      return max_lr;
    case LrShape::inverse_sqrt: {
      // Continuous with the warm-up, whose last step (n = warmup_steps) has max_lr.
      const double n = static_cast<double>(step + 1);
      const double w = static_cast<double>(std::max<std::int64_t>(1, warmup_steps));
      return std::max(min_lr, max_lr * std::sqrt(w / n));
    }
    case LrShape::cosine:
    case LrShape::linear:
    case LrShape::wsd:
      break;
  }
  if (step >= decay_steps) return min_lr;
  const std::int64_t start = shape == LrShape::wsd ? decay_start() : warmup_steps;
  if (step < start) return max_lr;  // wsd's stable phase
  const double progress =
      static_cast<double>(step - start) / std::max<std::int64_t>(1, decay_steps - start);
  if (shape == LrShape::cosine)
    return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (max_lr - min_lr);
  return max_lr + progress * (min_lr - max_lr);  // linear, and wsd's decay
}

}  // namespace kintsugi
