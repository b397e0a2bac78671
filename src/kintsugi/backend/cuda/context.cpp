#include "kintsugi/backend/cuda/context.hpp"

#include <cublasLt.h>

#include <cstdlib>

#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda {

namespace {

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

Context::Context() {
  const int count = device_count();
  if (count == 0)
    fail(
        "no CUDA device is visible (no NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES is "
        "empty): use --device cpu");
  device_ = local_rank() % count;
  check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, device_), "cudaGetDeviceProperties");
  name_ = props.name;
  total_memory_ = props.totalGlobalMem;
  compute_capability_ = props.major * 10 + props.minor;
  multiprocessors_ = props.multiProcessorCount;
  char pci[32] = {};
  if (cudaDeviceGetPCIBusId(pci, sizeof pci, device_) == cudaSuccess) pci_bus_id_ = pci;
  else cudaGetLastError();  // no id: no energy counter (docs/energy.md), not an error
  if (compute_capability_ < KINTSUGI_CUDA_MIN_ARCH)
    fail(
        "GPU {} has compute capability {}.{}, but this kintsugi was built for {}.{} and newer: "
        "rebuild with -DKINTSUGI_CUDA_ARCHITECTURES=\"{}{}-real;{}{}-virtual\"",
        name_, props.major, props.minor, KINTSUGI_CUDA_MIN_ARCH / 10, KINTSUGI_CUDA_MIN_ARCH % 10,
        props.major, props.minor, props.major, props.minor);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  if (cublasLtCreate(&blas_) != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt could not start (cublasLtCreate)");
}

Context& Context::get() {
  static Context* context = new Context();  // never destroyed (see the header)
  return *context;
}

}  // namespace kintsugi::cuda
