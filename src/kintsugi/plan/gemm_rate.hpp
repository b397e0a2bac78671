#pragma once
// The measured fp32 GEMM rate of this machine: the CPU's practical dense peak, used as the
// denominator of MFU on CPUs (whose datasheet peaks are rarely reachable) and by the planner's
// `local` cluster. Measured by `kintsugi bench gemm` and cached per (CPU model, threads).
#include <optional>
#include <string>

namespace kintsugi {

struct GemmRate {
  double gflops = 0;
  int threads = 0;
  int size = 0;        // square matrices of this size
  std::string cpu;     // CPU model name
  std::string source;  // how it was obtained, for logs
};

// Best of `repeats` fp32 GEMMs of size x size after a warm-up, on the current thread count.
GemmRate measure_gemm_rate(int size = 3072, int repeats = 5);
std::optional<GemmRate> cached_gemm_rate(int threads);
// Caches `rate`, or keeps the cached one if it is higher (the peak is the best ever seen).
void store_gemm_rate(const GemmRate& rate);
// The cached rate for the current thread count, measuring (and caching) it when absent.
GemmRate local_gemm_rate();
std::string cpu_model_name();

}  // namespace kintsugi
