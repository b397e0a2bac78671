#pragma once
// Communication staging buffers, pooled: a layer's gathered parameters (ZeRO-3) and a
// micro-batch's staged gradients (ZeRO-2/3) live in one only while in use; the pool hands a
// returned buffer to the next layer of the same or smaller size instead of allocating again.
// They count as communication memory.
#include <cstddef>
#include <map>
#include <memory>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

struct Staging {
  Buffer buffer;
  CommHandle pending;  // the gather into it, or the reduce-scatter out of it
};

class StagingPool {
 public:
  explicit StagingPool(Backend& backend) : backend_(backend) {}
  // A buffer of at least `bytes`.
  std::unique_ptr<Staging> take(std::size_t bytes);
  // Back to the pool; its transfer must be complete (or waited for by the next taker).
  void give_back(std::unique_ptr<Staging> staging);

 private:
  Backend& backend_;
  std::multimap<std::size_t, std::unique_ptr<Staging>> pool_;
};

}  // namespace kintsugi
