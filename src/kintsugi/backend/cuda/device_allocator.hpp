#pragma once
// GPU memory behind Buffer (core/allocator.hpp): cudaMalloc, zero-filled on the context's
// stream; copies to and from the host ordered on that stream after every op enqueued before
// them. Registered for Device::cuda when the first CUDA backend starts.
#include "kintsugi/core/allocator.hpp"

namespace kintsugi::cuda {

Allocator& device_allocator();

}  // namespace kintsugi::cuda
