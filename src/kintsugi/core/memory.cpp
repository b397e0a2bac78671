#include "kintsugi/core/memory.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace kintsugi {

std::string_view name_of(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::parameters: return "parameters";
    case MemoryKind::gradients: return "gradients";
    case MemoryKind::optimizer_state: return "optimizer_state";
    case MemoryKind::activations: return "activations";
    case MemoryKind::workspace: return "workspace";
    case MemoryKind::communication: return "communication";
    case MemoryKind::count: break;
  }
  return "?";
}

void MemoryTracker::allocated(MemoryKind kind, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto k = static_cast<int>(kind);
  current_[k] += bytes;
  if (current_[k] > peak_[k]) peak_[k] = current_[k];
  std::size_t total = 0;
  for (auto c : current_) total += c;
  if (total > peak_total_) peak_total_ = total;
}

void MemoryTracker::released(MemoryKind kind, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  current_[static_cast<int>(kind)] -= bytes;
}

std::size_t MemoryTracker::current(MemoryKind kind) const {
  std::lock_guard lock(mutex_);
  return current_[static_cast<int>(kind)];
}

std::size_t MemoryTracker::peak(MemoryKind kind) const {
  std::lock_guard lock(mutex_);
  return peak_[static_cast<int>(kind)];
}

std::size_t MemoryTracker::current_total() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (auto c : current_) total += c;
  return total;
}

std::size_t MemoryTracker::peak_total() const {
  std::lock_guard lock(mutex_);
  return peak_total_;
}

Buffer::Buffer(MemoryTracker& tracker, MemoryKind kind, std::size_t bytes)
    : bytes_(bytes), tracker_(&tracker), kind_(kind) {
  if (bytes == 0) return;
  // Large buffers go on 2 MiB pages where the kernel allows it (transparent huge pages in
  // "madvise" mode): GEMMs stream through weights and activations of hundreds of MiB, and 4 KiB
  // pages would cost a TLB miss every few rows.
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  const bool huge = bytes >= 2 * kHugePage;
  const std::size_t align = huge ? kHugePage : 64;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  data_ = static_cast<std::byte*>(std::aligned_alloc(align, rounded));
  if (!data_)
    fail("out of host memory allocating {:.1f} MiB of {}: use a smaller model or batch",
         bytes / 1048576.0, name_of(kind));
  if (huge) madvise(data_, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
  std::memset(data_, 0, rounded);  // first touch now, not in the first step
  tracker_->allocated(kind_, bytes_);
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) {
    std::free(data_);
    tracker_->released(kind_, bytes_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tracker_ = other.tracker_;
    kind_ = other.kind_;
  }
  return *this;
}

Tensor Buffer::view(DType dtype, Shape shape, std::size_t byte_offset) const {
  Tensor t{data_ + byte_offset, dtype, shape};
  KINTSUGI_ASSERT(byte_offset + t.bytes() <= bytes_);
  return t;
}

}  // namespace kintsugi
