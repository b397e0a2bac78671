#include "kintsugi/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kintsugi {

std::int64_t LrSchedule::decay_start() const {
  if (shape != LrShape::wsd) return decay_steps;
  // At least one step decays, so that the last one reaches min_lr however short the run.
  const auto decaying = std::max<std::int64_t>(
      1, std::llround(decay_fraction * static_cast<double>(decay_steps)));
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
  // The n-th step (n = step + 1) as the warm-up counts them: the decay leaves max_lr at n =
  // start (the warm-up's last step, or wsd's last stable one) and reaches min_lr at n =
  // decay_steps, the last step of a run whose decay_steps is train.steps.
  const double progress =
      static_cast<double>(step + 1 - start) / static_cast<double>(decay_steps - start);
  if (shape == LrShape::cosine)
    return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (max_lr - min_lr);
  // Linear, and wsd's decay; written from min_lr so that progress 1 is min_lr exactly.
  return min_lr + (1.0 - progress) * (max_lr - min_lr);
}

}  // namespace kintsugi
