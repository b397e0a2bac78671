#include "kintsugi/core/allocator.hpp"

#include <sys/mman.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu; }

  void* allocate(std::size_t bytes, std::string_view what) override {
    // Large buffers go on 2 MiB pages where the kernel allows it (transparent huge pages in
    // "madvise" mode): GEMMs stream through weights and activations of hundreds of MiB, and
    // 4 KiB pages would cost a TLB miss every few rows.
    const bool huge = bytes >= 2 * kHugePage;
    const std::size_t align = huge ? kHugePage : 64;
    const std::size_t rounded = (bytes + align - 1) / align * align;
    void* data = std::aligned_alloc(align, rounded);
    if (!data)
      fail("out of host memory allocating {:.1f} MiB of {}: use a smaller model or batch",
           bytes / 1048576.0, what);
    if (huge) madvise(data, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
    std::memset(data, 0, rounded);  // first touch now, not in the first step
    return data;
  }
  void release(void* data, std::size_t) noexcept override { std::free(data); }
  void copy_to_host(void* host, const void* src, std::size_t bytes) override {
    std::memcpy(host, src, bytes);
  }
  void copy_from_host(void* dst, const void* host, std::size_t bytes) override {
    std::memcpy(dst, host, bytes);
  }

 private:
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
};

std::array<Allocator*, 2>& registry() {
  static std::array<Allocator*, 2> allocators{&host_allocator(), nullptr};
  return allocators;
}

}  // namespace

void* Allocator::allocate_staging(std::size_t bytes) {
  return host_allocator().allocate(bytes, "communication staging");
}

void Allocator::release_staging(void* data, std::size_t bytes) noexcept {
  host_allocator().release(data, bytes);
}

Allocator& host_allocator() {
  static HostAllocator host;
  return host;
}

Allocator& allocator_for(Device device) {
  Allocator* a = registry()[static_cast<std::size_t>(device)];
  if (!a) fail("no {} device: this build of kintsugi has no {} backend", name_of(device), name_of(device));
  return *a;
}

void register_allocator(Allocator& allocator) {
  registry()[static_cast<std::size_t>(allocator.device())] = &allocator;
}

}  // namespace kintsugi
