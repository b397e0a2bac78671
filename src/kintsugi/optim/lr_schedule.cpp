#include "kintsugi/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kintsugi {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / warmup_steps;
  if (step >= decay_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / std::max<std::int64_t>(1, decay_steps - warmup_steps);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (max_lr - min_lr);
}

}  // namespace kintsugi
