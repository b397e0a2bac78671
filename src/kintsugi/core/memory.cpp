#include "kintsugi/core/memory.hpp"

#include <utility>

#include "kintsugi/core/error.hpp"

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
  if (limit_.bytes > 0) {
    std::size_t total = bytes;
    for (auto c : current_) total += c;
    if (total > limit_.bytes)
      fail("this rank's tracked memory would reach {:.1f} MiB ({:.1f} MiB more for {}), past {} "
           "({:.1f} MiB): split the work over more ranks (--cp for long sequences, --tp, --pp, "
           "--zero) or raise the limit",
           static_cast<double>(total) / 1048576.0, static_cast<double>(bytes) / 1048576.0,
           name_of(kind), limit_.setting, static_cast<double>(limit_.bytes) / 1048576.0);
  }
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

Buffer::Buffer(Allocator& allocator, MemoryTracker& tracker, MemoryKind kind, std::size_t bytes)
    : bytes_(bytes), allocator_(&allocator), tracker_(&tracker), kind_(kind) {
  if (bytes == 0) return;
  tracker_->allocated(kind_, bytes_);  // first: over a limit, nothing is allocated
  try {
    data_ = static_cast<std::byte*>(allocator.allocate(bytes, name_of(kind)));
  } catch (...) {
    tracker_->released(kind_, bytes_);
    throw;
  }
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) {
    allocator_->release(data_, bytes_);
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
    allocator_ = other.allocator_;
    tracker_ = other.tracker_;
    kind_ = other.kind_;
  }
  return *this;
}

Tensor Buffer::view(DType dtype, Shape shape, std::size_t byte_offset) const {
  Tensor t{data_ + byte_offset, dtype, shape, device()};
  KINTSUGI_ASSERT(byte_offset + t.bytes() <= bytes_);
  return t;
}

}  // namespace kintsugi
