#pragma once
// The CUDA runtime API as the CUDA backend uses it, for the CPU emulator (cuda_emulator.hpp):
// memory is host memory, streams run everything at once, kernels run on fibers.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda_emulator.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

#define threadIdx (::cuda_emu::place().thread)
#define blockIdx (::cuda_emu::place().block)
#define blockDim (::cuda_emu::place().block_dim)
#define gridDim (::cuda_emu::place().grid_dim)

using std::max;
using std::min;

typedef struct CUstream_st* cudaStream_t;

// The 16-byte vector type the kernels load and store whole.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorNoDevice = 100,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int device);
// The emulated device has no PCI address: NVML finds no GPU for it (docs/energy.md).
cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id, int len, int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// Events: the work before a record has run when it returns, so an event holds the host time of
// its record.
typedef struct CUevent_st* cudaEvent_t;
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMallocHost(void** pointer, std::size_t bytes);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
// `height` rows of `width` bytes, dpitch and spitch bytes apart; each side is checked as one
// range from its first row's start to its last row's end, as cudaMemcpyAsync checks its bytes.
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                              std::size_t width, std::size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream = 0);

template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize)
    ::cuda_emu::set_max_dynamic_shared(::cuda_emu::kernel_id(kernel), value);
  return cudaSuccess;
}

inline void __syncthreads() { ::cuda_emu::syncthreads(); }
// A warp barrier: a shuffle that exchanges nothing.
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cuda_emu::shuffle(mask, 0, 0, false); }

template <class T>
T cuda_emu_shuffle(unsigned mask, T value, int source, bool xor_mode) {
  static_assert(sizeof(T) <= 8);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ::cuda_emu::shuffle(mask, bits, source, xor_mode);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}
template <class T>
T __shfl_sync(unsigned mask, T value, int source) {
  return cuda_emu_shuffle(mask, value, source, false);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  return cuda_emu_shuffle(mask, value, lane_mask, true);
}

// Hooks of backend/cuda/device_math.cuh.
#define KINTSUGI_CUDA_LAUNCH(kernel, grid, block, shared, stream, ...)                         \
  ::cuda_emu::launch(::cuda_emu::kernel_id(kernel), #kernel, dim3(grid), dim3(block), shared, \
                     [=] { kernel(__VA_ARGS__); })
template <class T>
T* dynamic_shared() {
  return static_cast<T*>(::cuda_emu::dynamic_shared_memory());
}
#define KINTSUGI_CUDA_CHECK_INDEX(ref, i)                                                     \
  do {                                                                                        \
    if ((i) < 0 || (i) >= (ref).count)                                                        \
      ::cuda_emu::kernel_error("element " + std::to_string(i) + " of a tensor of " +          \
                               std::to_string((ref).count) + " accessed");                    \
    if (!::cuda_emu::is_device_memory((ref).data))                                            \
      ::cuda_emu::kernel_error("host memory accessed");                                       \
  } while (0)
