#pragma once
// A stand-in device for tests of the seams a GPU plugs into: "device" memory is host pages mapped
// PROT_NONE, opened only while the device's own code runs (while_open: an op of its backend, or
// one of the allocator's copies). Any other access -- a checkpoint writer dereferencing a
// parameter, a communicator handing device memory to MPI -- crashes the test. Thread-safe: a
// communicator's progress thread copies staged buffers back while the main thread computes.
// GuardedBackend runs the CPU backend's kernels on that memory.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "kintsugi/backend/forwarding_backend.hpp"
#include "kintsugi/core/allocator.hpp"

namespace kintsugi::testing {

class GuardedAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cuda; }
  void* allocate(std::size_t bytes, std::string_view) override {
    std::lock_guard lock(mutex_);
    const std::size_t size = round_up(bytes);
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zeroed
    if (p == MAP_FAILED) die("mmap failed");
    blocks_[p] = size;
    if (open_) protect(p, size, PROT_READ | PROT_WRITE);
    return p;
  }
  void release(void* data, std::size_t) noexcept override {
    std::lock_guard lock(mutex_);
    munmap(data, blocks_.at(data));
    blocks_.erase(data);
  }
  void copy_to_host(void* host, const void* src, std::size_t bytes) override {
    ++copies;
    while_open([&] { std::memcpy(host, src, bytes); });
  }
  void copy_from_host(void* dst, const void* host, std::size_t bytes) override {
    ++copies;
    while_open([&] { std::memcpy(dst, host, bytes); });
  }
  void* allocate_staging(std::size_t bytes) override {
    ++staging;
    return Allocator::allocate_staging(bytes);
  }
  // Runs fn with every block readable and writable (re-entrant: an op may copy).
  template <class Fn>
  void while_open(Fn&& fn) {
    std::lock_guard lock(mutex_);
    if (open_) return fn();
    for (auto& [p, size] : blocks_) protect(p, size, PROT_READ | PROT_WRITE);
    open_ = true;
    fn();
    for (auto& [p, size] : blocks_) protect(p, size, PROT_NONE);
    open_ = false;
  }
  bool leaked() const {
    std::lock_guard lock(mutex_);
    return !blocks_.empty();
  }
  std::atomic<int> copies{0}, staging{0};

 private:
  [[noreturn]] static void die(const char* what) {
    std::fprintf(stderr, "guarded device: %s\n", what);
    std::abort();
  }
  static std::size_t round_up(std::size_t bytes) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  static void protect(void* p, std::size_t size, int mode) {
    if (mprotect(p, size, mode) != 0) die("mprotect failed");
  }
  mutable std::recursive_mutex mutex_;
  std::map<void*, std::size_t> blocks_;
  bool open_ = false;
};

// The CPU backend's kernels on the guarded memory: memory opens for each op only.
class GuardedBackend final : public ForwardingBackend {
 public:
  GuardedBackend(Backend& cpu, GuardedAllocator& memory)
      : ForwardingBackend(cpu), memory_(memory) {}
  Device device() const override { return Device::cuda; }
  Allocator& allocator() override { return memory_; }

 protected:
  void around(const OpCall&, const std::function<void()>& run) override {
    memory_.while_open(run);
  }

 private:
  GuardedAllocator& memory_;
};

}  // namespace kintsugi::testing
