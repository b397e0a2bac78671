#pragma once
// Times whole training steps (forward, backward, global norm, AdamW) of a model on synthetic
// tokens: the engine's throughput without data loading or logging.
#include <cstdint>
#include <vector>

#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct StepBenchmarkResult {
  std::vector<double> step_seconds;  // timed steps only
  double median_seconds = 0;
  double tokens_per_s = 0;
  double gflops = 0;  // model FLOPs per second / 1e9 (plan/flops.hpp)
  std::size_t peak_memory_bytes = 0;
};

StepBenchmarkResult run_step_benchmark(const ModelConfig& model, std::int64_t batch,
                                       std::int64_t seq, int steps, int warmup);

}  // namespace kintsugi
