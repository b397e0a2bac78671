#include "kintsugi/plan/copy_bandwidth.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/device_timing.hpp"

namespace kintsugi {

double measure_copy_bandwidth_gbs(Backend& backend, std::size_t bytes, int repeats) {
  const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
  if (n < 1) fail("a copy bandwidth needs at least {} bytes, not {}", sizeof(float), bytes);
  const Buffer a = backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * 4);
  const Buffer b = backend.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * 4);
  const Tensor src = a.view(DType::f32, {n}), dst = b.view(DType::f32, {n});
  const double seconds =
      best_seconds_per_call(backend, [&] { backend.copy(src, dst); }, repeats);
  return 2.0 * static_cast<double>(n) * 4.0 / seconds / 1e9;  // read + write
}

}  // namespace kintsugi
