// The one place a backend is chosen (train.device, --device). A GPU backend is its own library
// (backend/cuda/), linked in and declared here only when the build has it.
#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/error.hpp"

#ifdef KINTSUGI_WITH_CUDA
#include "kintsugi/backend/cuda/cuda_backend.hpp"
#endif

namespace kintsugi {

std::unique_ptr<Backend> make_backend(Device device, MemoryTracker& memory) {
  switch (device) {
    case Device::cpu: return make_cpu_backend(memory);
    case Device::cuda:
#ifdef KINTSUGI_WITH_CUDA
      return make_cuda_backend(memory);
#else
      fail("this kintsugi was built without CUDA: rebuild with scripts/build.sh -DKINTSUGI_CUDA=ON "
           "(needs nvcc) or use --device cpu");
#endif
  }
  KINTSUGI_ASSERT(false);
}

}  // namespace kintsugi
