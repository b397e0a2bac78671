#pragma once
// Device scratch that only grows: kernels ask for what a call needs, the buffer reallocates
// only when a call needs more than ever before, so after the first step nothing is allocated.
// Tracked as workspace. Ops run in order on one stream, so one buffer serves call after call;
// what it held is lost when it grows.
#include <cstddef>

#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/core/memory.hpp"

namespace kintsugi::cuda {

class DeviceScratch {
 public:
  DeviceScratch(Allocator& allocator, MemoryTracker& memory)
      : allocator_(allocator), memory_(memory) {}
  Scratch get(std::size_t bytes) {
    if (bytes > buffer_.size()) {
      buffer_ = Buffer();  // release first: the old and new never coexist
      buffer_ = Buffer(allocator_, memory_, MemoryKind::workspace, bytes);
    }
    return {buffer_.data(), buffer_.size()};
  }

 private:
  Allocator& allocator_;
  MemoryTracker& memory_;
  Buffer buffer_;
};

}  // namespace kintsugi::cuda
