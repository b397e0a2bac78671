#include "kintsugi/optim/multi_tensor.hpp"

#include <atomic>

#include "kintsugi/core/switches.hpp"

namespace kintsugi {

namespace {
std::atomic<bool>& flag() {
  static std::atomic<bool> on{Switches::process().on(Switch::multi_tensor)};
  return on;
}
}  // namespace

bool multi_tensor_ops() { return flag().load(std::memory_order_relaxed); }
void set_multi_tensor_ops(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace kintsugi
