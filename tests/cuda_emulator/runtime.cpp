// The CUDA runtime API of the emulator: "device" memory is host memory whose blocks are
// recorded, so that copies and memsets are checked to stay inside device allocations on the
// device side (and outside them on the host side), as a GPU would require.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda_runtime.h"

namespace cuda_emu {

namespace {
thread_local cudaError_t last_error = cudaSuccess;
std::mutex memory_mutex;
std::map<const char*, std::size_t> allocations;  // device blocks: start -> bytes
std::map<const char*, std::size_t> mapped;       // those of them mapped on their own: -> bytes
std::atomic<std::uint64_t> frees{0};

// Blocks of 2 MiB and more are mapped on their own, 2-MiB aligned and on transparent huge pages
// where the kernel offers them (madvise): the 32-MiB GEMM workspace every CUDA backend allocates
// (and zeroes) then costs ~5 ms instead of ~170 ms of 4-KiB page faults (measured on the 2-core
// VM the suite runs on), which was most of the time of the emulated GEMM tests. Freed, they are
// unmapped, as large blocks from malloc are: a kernel that reads one after cudaFree still faults.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
void* map_block(std::size_t bytes) {
  const std::size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(p);
  char* start = reinterpret_cast<char*>(
      (reinterpret_cast<std::uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage);
  if (start > base) munmap(base, static_cast<std::size_t>(start - base));
  if (start + length < base + length + kHugePage)
    munmap(start + length, static_cast<std::size_t>(base + kHugePage - start));
  madvise(start, length, MADV_HUGEPAGE);  // a hint: without it, 4-KiB pages
  mapped[start] = length;
  return start;
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "CUDA emulator: %s\n", message.c_str());
  std::abort();
}

// Whether [p, p + bytes) lies inside one device allocation.
bool on_device(const void* p, std::size_t bytes) {
  std::lock_guard lock(memory_mutex);
  const char* c = static_cast<const char*>(p);
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

void expect_device(const void* p, std::size_t bytes, const char* what) {
  if (bytes > 0 && !on_device(p, bytes))
    die(std::string(what) + ": " + std::to_string(bytes) + " bytes that are not device memory");
}
void expect_host(const void* p, std::size_t bytes, const char* what) {
  if (bytes > 0 && on_device(p, 1))
    die(std::string(what) + ": the host side is device memory");
}
}  // namespace

void set_last_error(cudaError_t error) { last_error = error; }

bool is_device_memory(const void* p) {
  // The last block found, valid until the next cudaFree.
  thread_local const char *begin = nullptr, *end = nullptr;
  thread_local std::uint64_t seen_frees = 0;
  const char* c = static_cast<const char*>(p);
  if (seen_frees == frees.load() && c >= begin && c < end) return true;
  std::lock_guard lock(memory_mutex);
  seen_frees = frees.load();
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return false;
  --it;
  if (c >= it->first + it->second) return false;
  begin = it->first;
  end = it->first + it->second;
  return true;
}

}  // namespace cuda_emu

using cuda_emu::expect_device;
using cuda_emu::expect_host;

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emu::last_error;
  cuda_emu::last_error = cudaSuccess;
  return e;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int) {
  std::snprintf(props->name, sizeof(props->name), "CUDA emulator (CPU)");
  props->totalGlobalMem = std::size_t{16} << 30;
  props->major = 9;
  props->minor = 0;
  props->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return cudaErrorInvalidValue; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  static char token;
  *stream = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }  // all work is done

struct CUevent_st {
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) cuda_emu::die("cudaEventElapsedTime of an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  std::lock_guard lock(cuda_emu::memory_mutex);
  *pointer = bytes >= cuda_emu::kHugePage ? cuda_emu::map_block(bytes)
                                         : std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (!*pointer) return cudaErrorMemoryAllocation;
  cuda_emu::allocations[static_cast<const char*>(*pointer)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  std::lock_guard lock(cuda_emu::memory_mutex);
  if (cuda_emu::allocations.erase(static_cast<const char*>(pointer)) != 1)
    cuda_emu::die("cudaFree of a pointer cudaMalloc did not return");
  ++cuda_emu::frees;
  if (auto it = cuda_emu::mapped.find(static_cast<const char*>(pointer)); it != cuda_emu::mapped.end()) {
    munmap(pointer, it->second);
    cuda_emu::mapped.erase(it);
  } else {
    std::free(pointer);
  }
  return cudaSuccess;
}

// Page-locked host memory is host memory here.
cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  *pointer = std::malloc(bytes == 0 ? 1 : bytes);
  return *pointer ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  *total = std::size_t{16} << 30;
  *free = *total;
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t) {
  expect_device(pointer, bytes, "cudaMemsetAsync");
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

namespace {
// The sides of a copy: `dst_bytes` from dst and `src_bytes` from src must lie where `kind`
// says; false for a kind the emulator does not copy.
bool check_copy(const char* what, void* dst, std::size_t dst_bytes, const void* src,
                std::size_t src_bytes, cudaMemcpyKind kind) {
  const std::string on = std::string(what) + (kind == cudaMemcpyHostToDevice   ? " to the device"
                                              : kind == cudaMemcpyDeviceToHost ? " to the host"
                                                                               : " on the device");
  switch (kind) {
    case cudaMemcpyHostToDevice:
      expect_device(dst, dst_bytes, on.c_str());
      expect_host(src, src_bytes, on.c_str());
      return true;
    case cudaMemcpyDeviceToHost:
      expect_device(src, src_bytes, on.c_str());
      expect_host(dst, dst_bytes, on.c_str());
      return true;
    case cudaMemcpyDeviceToDevice:
      expect_device(src, src_bytes, on.c_str());
      expect_device(dst, dst_bytes, on.c_str());
      return true;
    default: return false;
  }
}
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  if (!check_copy("cudaMemcpyAsync", dst, bytes, src, bytes, kind)) return cudaErrorInvalidValue;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                              std::size_t width, std::size_t height, cudaMemcpyKind kind,
                              cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  if (width == 0 || height == 0) return cudaSuccess;
  // From the first row's start to the last row's end, on each side.
  const std::size_t dst_span = (height - 1) * dpitch + width;
  const std::size_t src_span = (height - 1) * spitch + width;
  if (!check_copy("cudaMemcpy2DAsync", dst, dst_span, src, src_span, kind))
    return cudaErrorInvalidValue;
  for (std::size_t row = 0; row < height; ++row)
    std::memmove(static_cast<char*>(dst) + row * dpitch,
                 static_cast<const char*>(src) + row * spitch, width);
  return cudaSuccess;
}
