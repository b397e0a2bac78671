#include "kintsugi/optim/optimizer.hpp"

#include "kintsugi/optim/adamw.hpp"
#include "kintsugi/optim/lion.hpp"

namespace kintsugi {

std::unique_ptr<Optimizer> make_optimizer(Backend& backend,
                                          const std::vector<OptimizerSegment>& segments,
                                          const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::lion:
      return std::make_unique<Lion>(backend, segments, c);
    case OptimizerKind::adamw:
      break;
  }
  return std::make_unique<AdamW>(
      backend, segments,
      AdamWConfig{.beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.weight_decay});
}

}  // namespace kintsugi
