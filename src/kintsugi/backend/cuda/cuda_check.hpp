#pragma once
// Error checks for CUDA calls and kernel launches. Every failure becomes a kintsugi::Error that
// names the call and CUDA's message. Kernel errors that happen while a kernel runs surface at the
// next synchronizing call; KINTSUGI_CUDA_SYNC=1 in the environment synchronizes after every
// launch, so an error names the kernel that caused it (slow: for debugging on a new GPU).
#include <cuda_runtime.h>

namespace kintsugi::cuda {

// Throws kintsugi::Error("CUDA error in <what>: <message>") unless status is cudaSuccess.
void check(cudaError_t status, const char* what);
// After a kernel launch: the launch error, and with KINTSUGI_CUDA_SYNC=1 the kernel's own.
void check_launch(const char* kernel, cudaStream_t stream);

}  // namespace kintsugi::cuda
