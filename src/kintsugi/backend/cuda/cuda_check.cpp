#include "kintsugi/backend/cuda/cuda_check.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi::cuda {

namespace {
bool sync_every_launch() {
  static const bool on = Switches::process().on(Switch::cuda_sync);
  return on;
}
}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

void check_launch(const char* kernel, cudaStream_t stream) {
  check(cudaGetLastError(), kernel);
  if (sync_every_launch()) check(cudaStreamSynchronize(stream), kernel);
}

}  // namespace kintsugi::cuda
