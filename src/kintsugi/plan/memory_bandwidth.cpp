#include "kintsugi/plan/memory_bandwidth.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/device_timing.hpp"

namespace kintsugi {

double measure_elementwise_bandwidth_gbs(Backend& backend, DType dtype, std::size_t bytes,
                                         int repeats) {
  const std::size_t element = size_of(dtype);
  const auto n = static_cast<std::int64_t>(bytes / element);
  if (n < 1) fail("a memory bandwidth needs at least {} bytes, not {}", element, bytes);
  const std::size_t size = static_cast<std::size_t>(n) * element;
  // Zero-filled: GELU's derivative of zeros is finite, so no NaN slows the kernel down.
  const Buffer x = backend.allocate(MemoryKind::workspace, size);
  const Buffer dy = backend.allocate(MemoryKind::workspace, size);
  const Buffer dx = backend.allocate(MemoryKind::workspace, size);
  const Tensor xt = x.view(dtype, {n}), dyt = dy.view(dtype, {n}), dxt = dx.view(dtype, {n});
  const double seconds =
      best_seconds_per_call(backend, [&] { backend.gelu_backward(xt, dyt, dxt); }, repeats);
  return 3.0 * static_cast<double>(size) / seconds / 1e9;  // x and dy read, dx written
}

}  // namespace kintsugi
