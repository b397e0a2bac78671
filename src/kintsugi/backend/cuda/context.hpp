#pragma once
// The process's GPU: which device this process uses, the one stream every CUDA backend op and
// every host copy is ordered on, and the cuBLASLt handle. Created on first use and kept for the
// life of the process (never destroyed: CUDA's own teardown at exit may already have run).
//
// Device choice: the node-local rank modulo the visible devices (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID or LOCAL_RANK), device 0 for a single process; CUDA_VISIBLE_DEVICES narrows it.
#include <cstddef>
#include <string>

#include "kintsugi/backend/cuda/kernels.hpp"

typedef struct cublasLtContext* cublasLtHandle_t;

namespace kintsugi::cuda {

// Visible CUDA devices; 0 when there is no GPU or no driver (never throws).
int device_count();

class Context {
 public:
  // The process's context; a kintsugi::Error naming the problem when no GPU can be used.
  static Context& get();

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t blas() const { return blas_; }
  const std::string& device_name() const { return name_; }
  std::size_t total_memory() const { return total_memory_; }
  int compute_capability() const { return compute_capability_; }
  int multiprocessors() const { return multiprocessors_; }
  // "0000:19:00.0": how NVML finds this device whatever CUDA_VISIBLE_DEVICES renumbered.
  const std::string& pci_bus_id() const { return pci_bus_id_; }

 private:
  Context();
  int device_ = 0, compute_capability_ = 0, multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t blas_ = nullptr;
  std::string name_, pci_bus_id_;
  std::size_t total_memory_ = 0;
};

}  // namespace kintsugi::cuda
