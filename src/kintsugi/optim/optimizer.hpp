#pragma once
// The optimizers a run chooses with train.optimizer (docs/config.md), behind one interface that
// ZeRO's sharded state (parallel/sharded_state.hpp) and the checkpoints use: a flat state of
// `moments()` buffers the length of the updated elements, cut the same way whichever optimizer
// holds it, so that sharding, saving and resharding treat every optimizer alike.
//
//   adamw  AdamW (optim/adamw.hpp): two moments per weight
//   lion   Lion (optim/lion.hpp): one moment per weight, the sign of an interpolation as the
//          update; half AdamW's optimizer state
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

enum class OptimizerKind : std::uint8_t { adamw, lion };
template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::array values = {std::pair{OptimizerKind::adamw, "adamw"},
                                        std::pair{OptimizerKind::lion, "lion"}};
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;  // AdamW only
  double weight_decay = 0.1;
};

// A contiguous range of parameters (whole or sharded) that shares a weight-decay setting (none
// on biases and norm weights): its weights (the f32 master copy under mixed precision), its
// gradient and, under mixed precision, the working copy to refresh.
struct OptimizerSegment {
  Tensor param;         // updated in place
  Tensor grad;
  Tensor working_copy;  // empty, or the low-precision weights to write after the update
  bool decay = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr; gradients are multiplied by grad_scale first (clipping,
  // loss-scale removal).
  virtual void step(double lr, double grad_scale) = 0;
  std::int64_t steps_taken() const { return steps_; }
  virtual std::int64_t numel() const = 0;
  virtual OptimizerKind kind() const = 0;
  // Moment buffers per element: 2 for AdamW (first and second), 1 for Lion.
  virtual int moments() const = 0;
  // Checkpoints. Moment `which` (< moments()) of elements [offset, offset + n) of the state,
  // counted across the segments in order.
  virtual Tensor moment(int which, std::int64_t offset, std::int64_t n) const = 0;
  // Resuming: the step count continues from the saved one (AdamW's bias correction), and the
  // working copies are rounded again from the restored weights (as step() would have left them).
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  virtual void refresh_working_copies() = 0;

 protected:
  std::int64_t steps_ = 0;
};

// The optimizer `config` names, over `segments`; its moments have the segments' element type.
std::unique_ptr<Optimizer> make_optimizer(Backend& backend,
                                          const std::vector<OptimizerSegment>& segments,
                                          const OptimizerConfig& config);

}  // namespace kintsugi
