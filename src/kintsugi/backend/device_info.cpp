// Like factory.cpp, the one other place that knows which device backends the build has: the
// CUDA side is compiled in only with KINTSUGI_WITH_CUDA (cmake/Cuda.cmake).
#include "kintsugi/backend/device_info.hpp"

#include <unistd.h>

#include "kintsugi/core/error.hpp"

#ifdef KINTSUGI_WITH_CUDA
#include "kintsugi/backend/cuda/context.hpp"
#endif

namespace kintsugi {

double device_memory_bytes(Device device) {
  switch (device) {
    case Device::cpu:
      return static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
             static_cast<double>(sysconf(_SC_PAGE_SIZE));
    case Device::cuda:
#ifdef KINTSUGI_WITH_CUDA
      return static_cast<double>(cuda::Context::get().total_memory());
#else
      return 0;
#endif
  }
  return 0;
}

DeviceInfo device_info(const Backend& backend) {
  DeviceInfo info;
  info.name = backend.hardware();
  switch (backend.device()) {
    case Device::cpu:
      info.memory_bytes = device_memory_bytes(Device::cpu);
      info.visible_devices = 1;
      return info;
    case Device::cuda:
#ifdef KINTSUGI_WITH_CUDA
      // The backend exists, so the process's GPU context does: these are its device's figures.
      info.memory_bytes = device_memory_bytes(Device::cuda);
      info.visible_devices = cuda::device_count();
      return info;
#else
      break;  // no CUDA backend can exist in this build
#endif
  }
  KINTSUGI_ASSERT(false);
}

std::string pci_bus_id(const Backend& backend) {
#ifdef KINTSUGI_WITH_CUDA
  if (backend.device() == Device::cuda) return cuda::Context::get().pci_bus_id();
#endif
  (void)backend;
  return "";
}

}  // namespace kintsugi
