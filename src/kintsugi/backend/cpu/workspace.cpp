#include "kintsugi/backend/cpu/workspace.hpp"

#include <omp.h>

#include <algorithm>

namespace kintsugi::cpu {

std::size_t ThreadWorkspace::reserve(std::size_t bytes_per_thread) {
  int threads = omp_get_max_threads();
  std::size_t stride = (bytes_per_thread + 4095) / 4096 * 4096;  // threads never share a page
  if (stride > stride_ || threads > threads_) {
    stride_ = std::max(stride, stride_);
    threads_ = std::max(threads, threads_);
    buffer_ = Buffer(memory_, MemoryKind::workspace, stride_ * threads_);
  }
  return stride_;
}

std::byte* GrowBuffer::get(std::size_t bytes) {
  if (bytes > buffer_.size()) buffer_ = Buffer(memory_, MemoryKind::workspace, bytes);
  return buffer_.data();
}

}  // namespace kintsugi::cpu
