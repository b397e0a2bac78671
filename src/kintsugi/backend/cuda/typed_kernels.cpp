#include "kintsugi/backend/cuda/typed_kernels.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kintsugi::cuda {

namespace {
std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("KINTSUGI_TYPED_KERNELS");
    return !(v && std::strcmp(v, "0") == 0);
  }()};
  return on;
}
}  // namespace

bool typed_kernels() { return flag().load(std::memory_order_relaxed); }
void set_typed_kernels(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace kintsugi::cuda
