#pragma once
// Tracked memory. Every byte the engine allocates belongs to one category, so the step log and
// the tests can compare current and peak use per category with the analytic memory model.
// Buffers are allocated once when a run starts, never per step.
#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

#include "kintsugi/core/allocator.hpp"
#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

enum class MemoryKind : int {
  parameters,
  gradients,
  optimizer_state,
  activations,    // tensors saved by forward for backward
  workspace,      // transient buffers: activation gradients, logits chunks, kernel scratch
  communication,  // staging buffers of collectives
  count
};
constexpr int kMemoryKinds = static_cast<int>(MemoryKind::count);
std::string_view name_of(MemoryKind kind);

// A cap on a rank's tracked bytes (0: none), and the setting that set it, which the error names.
struct MemoryLimit {
  std::size_t bytes = 0;
  std::string setting;
};

// Thread-safe: the communication thread allocates its staging buffers too.
class MemoryTracker {
 public:
  MemoryTracker() = default;
  explicit MemoryTracker(MemoryLimit limit) : limit_(std::move(limit)) {}
  // Throws kintsugi::Error, recording nothing, when the total would pass the limit: buffers
  // are allocated when a run starts, so a run that does not fit stops before any work.
  void allocated(MemoryKind kind, std::size_t bytes);
  void released(MemoryKind kind, std::size_t bytes);
  std::size_t current(MemoryKind kind) const;
  std::size_t peak(MemoryKind kind) const;
  std::size_t current_total() const;
  std::size_t peak_total() const;

 private:
  mutable std::mutex mutex_;
  std::array<std::size_t, kMemoryKinds> current_{};
  std::array<std::size_t, kMemoryKinds> peak_{};
  std::size_t peak_total_ = 0;
  MemoryLimit limit_;
};

// Owning, 64-byte aligned, zero-initialised memory of one device, from that device's allocator,
// reported to a tracker.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& allocator, MemoryTracker& tracker, MemoryKind kind, std::size_t bytes);
  // Host memory (staging buffers, kernel scratch of the CPU backend).
  Buffer(MemoryTracker& tracker, MemoryKind kind, std::size_t bytes)
      : Buffer(host_allocator(), tracker, kind, bytes) {}
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  Device device() const { return allocator_ ? allocator_->device() : Device::cpu; }
  Tensor view(DType dtype, Shape shape, std::size_t byte_offset = 0) const;
  // Elements [begin, begin + count) of the buffer read as a flat array of dtype.
  Tensor elements(DType dtype, std::int64_t begin, std::int64_t count) const {
    return view(dtype, Shape{count}, static_cast<std::size_t>(begin) * size_of(dtype));
  }

 private:
  void reset();
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  Allocator* allocator_ = nullptr;
  MemoryTracker* tracker_ = nullptr;
  MemoryKind kind_ = MemoryKind::workspace;
};

}  // namespace kintsugi
