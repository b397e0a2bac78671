#include "kintsugi/backend/cuda/typed_kernels.hpp"

#include <atomic>

#include "kintsugi/core/switches.hpp"

namespace kintsugi::cuda {

namespace {
std::atomic<bool>& flag() {
  static std::atomic<bool> on{Switches::process().on(Switch::typed_kernels)};
  return on;
}
}  // namespace

bool typed_kernels() { return flag().load(std::memory_order_relaxed); }
void set_typed_kernels(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace kintsugi::cuda
