#include "kintsugi/optim/multi_tensor.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kintsugi {

namespace {
std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("KINTSUGI_MULTI_TENSOR");
    return !(v && std::strcmp(v, "0") == 0);
  }()};
  return on;
}
}  // namespace

bool multi_tensor_ops() { return flag().load(std::memory_order_relaxed); }
void set_multi_tensor_ops(bool on) { flag().store(on, std::memory_order_relaxed); }

}  // namespace kintsugi
