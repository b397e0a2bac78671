#pragma once
// Learning rate per step: a linear warm-up to max_lr over warmup_steps (every shape), then
//
//   cosine        half a cosine from max_lr down to min_lr at decay_steps, min_lr after
//                 (GPT-2/3 reproductions, Megatron's "cosine")
//   linear        a straight line from max_lr down to min_lr at decay_steps, min_lr after
//   constant      max_lr to the end (min_lr and decay_steps unused)
//   inverse_sqrt  max_lr sqrt(warmup_steps / n) for the n-th step (n = step + 1), never below
//                 min_lr (Vaswani et al. 2017; fairseq and Megatron's "inverse-square-root";
//                 decay_steps unused)
//   wsd           warmup-stable-decay: max_lr until the last decay_fraction of decay_steps,
//                 then a straight line down to min_lr at decay_steps, min_lr after (Hu et al.
//                 2024, MiniCPM; Hagele et al. 2024). The stable phase needs no end fixed in
//                 advance: a run can be extended and decayed from any checkpoint.
//
// Steps count as the warm-up and the logs count them, n = step + 1: the warm-up's n-th step
// trains at max_lr n / warmup_steps, and the decaying shapes train their decay_steps-th step
// (0-based decay_steps - 1: a run's last step when decay_steps = train.steps) at min_lr exactly.
//
// docs/config.md describes the keys that choose these (train.lr_schedule and friends).
#include <array>
#include <cstdint>
#include <utility>

#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

enum class LrShape : std::uint8_t { cosine, linear, constant, inverse_sqrt, wsd };
template <>
struct EnumNames<LrShape> {
  static constexpr std::array values = {
      std::pair{LrShape::cosine, "cosine"}, std::pair{LrShape::linear, "linear"},
      std::pair{LrShape::constant, "constant"}, std::pair{LrShape::inverse_sqrt, "inverse_sqrt"},
      std::pair{LrShape::wsd, "wsd"}};
};

struct LrSchedule {
  double max_lr = 0;
  double min_lr = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;  // the n-th step that trains at min_lr (cosine, linear, wsd)
  LrShape shape = LrShape::cosine;
  double decay_fraction = 0.2;  // wsd: the share of decay_steps spent decaying, in (0, 1]

  double at(std::int64_t step) const;  // step is 0-based
  // wsd: the first (0-based) step below max_lr, at least one step before decay_steps unless the
  // warm-up takes them all; decay_steps for the other shapes.
  std::int64_t decay_start() const;
};

}  // namespace kintsugi
