#pragma once
// Kernel scratch that only grows, so after the first step no kernel allocates: per-thread areas
// (attention blocks, rows staged in f32) and single buffers sized by the call (GEMM operands).
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

// One tracked buffer that grows to the largest size asked for. What it held is lost when it
// grows, so callers take everything they need from one get() per use.
class GrowBuffer {
 public:
  explicit GrowBuffer(MemoryTracker& memory) : memory_(memory) {}
  std::byte* get(std::size_t bytes);
  template <class T>
  T* get_as(std::size_t count) {
    return reinterpret_cast<T*>(get(count * sizeof(T)));
  }

 private:
  MemoryTracker& memory_;
  Buffer buffer_;
};

}  // namespace kintsugi::cpu
