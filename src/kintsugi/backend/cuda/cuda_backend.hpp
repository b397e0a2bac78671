#pragma once
// The CUDA backend: every Backend op as kernels on one GPU (backend/cuda/kernels.hpp), GEMMs
// through cuBLASLt (gemm.hpp), memory from the device allocator. Built only with
// -DKINTSUGI_CUDA=ON; make_backend(Device::cuda) returns it.
#include <memory>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

// A kintsugi::Error when no GPU can be used (no driver, no device).
std::unique_ptr<Backend> make_cuda_backend(MemoryTracker& memory);

// Visible CUDA devices (0 without a GPU or driver; never throws): tests skip on 0.
int cuda_device_count();

}  // namespace kintsugi
