#pragma once
// A device's memory bandwidth as the cost model uses it (ClusterSpec::memory_bandwidth_gbs:
// the memory-bound kernels of a step and the optimizer), measured as the rate one of the
// backend's own memory-bound kernels reaches: GELU backward (two reads and one write per
// element) over a buffer larger than the device's caches. Not a plain copy: on an H200 a copy
// moved 4187 GB/s while the step's elementwise kernels reached about 1900, and planning with
// the copy's rate predicted GPT-2 124M's step 32% fast against 15% with the kernel's
// (docs/planner.md).
#include <cstddef>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi {

// GB/s (1e9 bytes) of the best of `repeats` GELU backward calls over `bytes` of `dtype` per
// tensor, counting each byte read and written.
double measure_elementwise_bandwidth_gbs(Backend& backend, DType dtype, std::size_t bytes,
                                         int repeats = 5);

}  // namespace kintsugi
