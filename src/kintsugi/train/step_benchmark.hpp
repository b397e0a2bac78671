#pragma once
// Times whole training steps (forward, backward, global norm, AdamW) of a model on synthetic
// tokens: the engine's throughput without data loading or logging.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kintsugi/backend/profiling_backend.hpp"

#include "kintsugi/core/precision.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct StepBenchmarkResult {
  std::vector<double> step_seconds;  // timed steps only
  double median_seconds = 0;
  double tokens_per_s = 0;
  double gflops = 0;  // model FLOPs per second / 1e9 (plan/flops.hpp)
  std::size_t peak_memory_bytes = 0;  // tracked by the engine, on the run's device
  std::map<std::string, OpProfile> ops;  // per op kind, summed over the timed steps (profile)
  // Every step's (warm-up included) mean token loss and gradient norm, in order: two runs of
  // the same benchmark must give the same bits (bench/gpu_check.sh compares them).
  std::vector<double> losses, grad_norms;
};

// With `profile`, every backend op is timed (which adds a little overhead per op, and on a GPU
// a synchronization after each).
StepBenchmarkResult run_step_benchmark(const ModelConfig& model, std::int64_t batch,
                                       std::int64_t seq, int steps, int warmup,
                                       bool profile = false, Device device = Device::cpu,
                                       Precision precision = Precision::fp32);

}  // namespace kintsugi
