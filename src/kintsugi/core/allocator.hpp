#pragma once
// Where a Buffer's memory comes from. One allocator per device: the host's is always there; a
// device backend registers its own when it starts (backend/cuda), which is what lets Buffers,
// checkpoints and initialization work on any device without knowing which.
#include <cstddef>
#include <string_view>

#include "kintsugi/core/device.hpp"

namespace kintsugi {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // Zero-filled, 64-byte aligned memory of `bytes` (> 0). Out of memory is a kintsugi::Error
  // naming `what` (the memory category) and the size.
  virtual void* allocate(std::size_t bytes, std::string_view what) = 0;
  virtual void release(void* data, std::size_t bytes) noexcept = 0;
  // Byte copies between this device's memory and host memory. A copy sees every op enqueued on
  // the device before it and is complete when it returns.
  // Copies may come from any thread (a communicator's progress thread stages device buffers).
  virtual void copy_to_host(void* host, const void* src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host, std::size_t bytes) = 0;
  // Host memory that this device copies to and from fastest (page-locked for a GPU), for
  // staging its buffers through host-only libraries such as MPI. The host's own by default.
  virtual void* allocate_staging(std::size_t bytes);
  virtual void release_staging(void* data, std::size_t bytes) noexcept;
};

// Host memory; large blocks on transparent huge pages.
Allocator& host_allocator();
// The allocator of `device`: the host's, or the one a device backend registered (a
// kintsugi::Error if none did: the build has no backend for that device).
Allocator& allocator_for(Device device);
void register_allocator(Allocator& allocator);

}  // namespace kintsugi
