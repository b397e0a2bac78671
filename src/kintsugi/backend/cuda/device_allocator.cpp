#include "kintsugi/backend/cuda/device_allocator.hpp"

#include <cstdio>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda {

namespace {

// The context, current on the calling thread: copies and staging may come from a communicator's
// progress thread, whose current device is not set otherwise.
Context& current() {
  Context& ctx = Context::get();
  check(cudaSetDevice(ctx.device()), "cudaSetDevice");
  return ctx;
}

class DeviceAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cuda; }

  void* allocate(std::size_t bytes, std::string_view what) override {
    Context& ctx = Context::get();
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      fail(
          "out of GPU memory allocating {:.1f} MiB of {} ({:.1f} of {:.1f} GiB free on {}): use "
          "a smaller micro-batch, recompute, ZeRO or more GPUs (kintsugi plan finds a layout)",
          bytes / 1048576.0, what, free / 1073741824.0, total / 1073741824.0, ctx.device_name());
    }
    check(status, "cudaMalloc");
    check(cudaMemsetAsync(data, 0, bytes, ctx.stream()), "cudaMemsetAsync (new buffer)");
    return data;
  }

  void release(void* data, std::size_t) noexcept override {
    // Ops still queued may use the memory: wait for them, then free.
    const cudaStream_t stream = Context::get().stream();
    cudaError_t status = cudaStreamSynchronize(stream);
    if (status == cudaSuccess) status = cudaFree(data);
    if (status != cudaSuccess)
      std::fprintf(stderr, "kintsugi: CUDA error while freeing GPU memory: %s\n",
                   cudaGetErrorString(status));
  }

  void copy_to_host(void* host, const void* src, std::size_t bytes) override {
    const cudaStream_t stream = current().stream();
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (device to host copy)");
  }

  void copy_from_host(void* dst, const void* host, std::size_t bytes) override {
    const cudaStream_t stream = current().stream();
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (host to device)");
    // The host buffer may be freed or reused as soon as this returns.
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (host to device copy)");
  }

  // Page-locked, so copies to and from it run at full speed (MPI staging of device tensors).
  void* allocate_staging(std::size_t bytes) override {
    current();
    void* data = nullptr;
    check(cudaMallocHost(&data, bytes), "cudaMallocHost (communication staging)");
    return data;
  }

  void release_staging(void* data, std::size_t) noexcept override {
    const cudaError_t status = cudaFreeHost(data);
    if (status != cudaSuccess)
      std::fprintf(stderr, "kintsugi: CUDA error while freeing page-locked memory: %s\n",
                   cudaGetErrorString(status));
  }
};

}  // namespace

Allocator& device_allocator() {
  static DeviceAllocator* allocator = new DeviceAllocator();  // outlives every Buffer
  return *allocator;
}

}  // namespace kintsugi::cuda
