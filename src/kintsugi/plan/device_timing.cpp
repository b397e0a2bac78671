#include "kintsugi/plan/device_timing.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/timer.hpp"

namespace kintsugi {

double best_seconds_per_call(Backend& backend, const std::function<void()>& enqueue, int repeats,
                             double min_batch_seconds) {
  KINTSUGI_ASSERT(repeats >= 1);
  auto batch = [&](int calls) {
    Stopwatch sw;
    for (int i = 0; i < calls; ++i) enqueue();
    backend.synchronize();
    return sw.seconds() / calls;
  };
  batch(1);  // warm-up
  // One call sizes the batches; when it alone is long enough it counts as the first repeat, so
  // a slow call (a CPU GEMM of seconds) is not run once more than `repeats` asks.
  const double one = batch(1);
  const double wanted = std::ceil(min_batch_seconds / std::max(one, 1e-9));
  const int calls = static_cast<int>(std::clamp(wanted, 1.0, 100000.0));
  double best = calls == 1 ? one : 1e30;
  for (int r = calls == 1 ? 1 : 0; r < repeats; ++r) best = std::min(best, batch(calls));
  return best;
}

}  // namespace kintsugi
