#pragma once
// What the planner's `local` cluster needs to know about a backend's device besides the speed
// of its ops (which it times through the ops themselves): how much memory the device has and
// how many such devices this process could use. Read from the device, not measured.
#include <cstdint>
#include <string>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

struct DeviceInfo {
  std::string name;          // Backend::hardware()
  double memory_bytes = 0;   // the device's total memory (the CPU's: the machine's)
  int visible_devices = 0;   // GPUs visible to this process; 1 for the CPU
};

DeviceInfo device_info(const Backend& backend);

// The memory of the device a process of this machine trains on, before any backend exists: the
// machine's for the CPU (shared by the ranks on it), this process's GPU's for CUDA (starting its
// context); 0 where the build has no such device (the backend's factory says so).
double device_memory_bytes(Device device);

// The PCI bus id of the backend's GPU ("0000:19:00.0"), by which NVML finds its energy counter
// (docs/energy.md); "" for the CPU, for a GPU without one and in a build without CUDA (the
// CUDA emulator's backend included).
std::string pci_bus_id(const Backend& backend);

}  // namespace kintsugi
