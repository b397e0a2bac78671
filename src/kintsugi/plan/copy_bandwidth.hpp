#pragma once
// A device's memory bandwidth as the cost model uses it (ClusterSpec::memory_bandwidth_gbs:
// memory-bound kernels and the optimizer step): the backend's copy op over a buffer larger than
// the device's caches, counting each byte read and written.
#include <cstddef>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

// GB/s (1e9 bytes) of the best of `repeats` copies of `bytes` on the backend's device.
double measure_copy_bandwidth_gbs(Backend& backend, std::size_t bytes, int repeats = 5);

}  // namespace kintsugi
