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
  std::int64_t decay_steps = 0;  // step at which min_lr is reached (cosine, linear, wsd)
  LrShape shape = LrShape::cosine;
  double decay_fraction = 0.2;  // wsd: the share of decay_steps spent decaying, in (0, 1]

  double at(std::int64_t step) const;  // step is 0-based
  // wsd: the first step of the decay (max_lr before it); decay_steps for the other shapes.
  std::int64_t decay_start() const;
};

}  // namespace kintsugi
