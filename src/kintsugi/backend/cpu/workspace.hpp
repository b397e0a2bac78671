#pragma once
// Per-thread scratch for kernels that need it (attention score blocks). One tracked buffer of
// threads x stride bytes that only grows, so after the first step no kernel allocates.
#include <cstddef>

#include "kintsugi/core/memory.hpp"

namespace kintsugi::cpu {

class ThreadWorkspace {
 public:
  explicit ThreadWorkspace(MemoryTracker& memory) : memory_(memory) {}
  // Call outside parallel regions: makes room for `bytes` per thread and returns the stride
  // between consecutive threads' areas. Thread i's area starts at base() + i * stride.
  std::size_t reserve(std::size_t bytes_per_thread);
  std::byte* base() const { return buffer_.data(); }

 private:
  MemoryTracker& memory_;
  Buffer buffer_;
  std::size_t stride_ = 0;
  int threads_ = 0;
};

}  // namespace kintsugi::cpu
