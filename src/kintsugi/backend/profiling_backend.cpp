#include "kintsugi/backend/profiling_backend.hpp"

#include "kintsugi/core/timer.hpp"

namespace kintsugi {

void ProfilingBackend::around(const char* op, double flops, const std::function<void()>& run) {
  Stopwatch clock;
  run();
  inner().synchronize();
  OpProfile& p = profile_[op];
  ++p.calls;
  p.seconds += clock.seconds();
  p.flops += flops;
}

}  // namespace kintsugi
