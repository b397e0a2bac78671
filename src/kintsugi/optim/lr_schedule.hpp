#pragma once
// Learning rate: linear warm-up to max_lr over warmup_steps, then cosine decay to min_lr at
// decay_steps, constant after (as in GPT-2/3 reproductions and Megatron's "cosine" style).
#include <cstdint>

namespace kintsugi {

struct LrSchedule {
  double max_lr = 0;
  double min_lr = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;  // step at which min_lr is reached

  double at(std::int64_t step) const;  // step is 0-based
};

}  // namespace kintsugi
