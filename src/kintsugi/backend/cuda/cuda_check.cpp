#include "kintsugi/backend/cuda/cuda_check.hpp"

#include <cstdlib>
#include <cstring>

#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda {

namespace {
bool sync_every_launch() {
  static const bool on = [] {
    const char* v = std::getenv("KINTSUGI_CUDA_SYNC");
    return v && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
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
