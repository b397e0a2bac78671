#pragma once
// Times whole training steps (forward, backward, global norm, AdamW) of a model on synthetic
// tokens: the engine's throughput without data loading or logging.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/backend/profiling_backend.hpp"

#include "kintsugi/core/precision.hpp"
#include "kintsugi/core/switches.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct StepBenchmarkResult {
  std::vector<double> step_seconds;  // timed steps only, run unprofiled
  double median_seconds = 0;
  double tokens_per_s = 0;
  double gflops = 0;  // model FLOPs per second / 1e9 (plan/flops.hpp)
  std::size_t peak_memory_bytes = 0;  // tracked by the engine, on the run's device
  // With the profile: as many profiled steps, each after an unprofiled one (so both see the
  // same state of the machine), and what their ops took, summed over them.
  std::vector<double> profiled_step_seconds;
  bool profile_events = false;  // timed with the device's events (else the host clock)
  std::int64_t profile_marks = 0;  // event marks over the profiled steps
  std::map<std::string, OpProfile> ops;       // per op kind
  std::map<std::string, OpProfile> op_shapes;  // per op and shape (ProfilingBackend::by_shape)
  // Every unprofiled step's (warm-up included) mean token loss and gradient norm, in order: two
  // runs of the same benchmark must give the same bits (bench/gpu_check.sh compares them).
  std::vector<double> losses, grad_norms;
  // Measured energy of the timed unprofiled steps (train/job_energy.hpp): their joules summed
  // over their count, and what was measured, or why nothing was (energy_source then says so).
  std::optional<double> joules_per_step;
  std::string energy_source;
};

// With `profile`, every backend op of the profiled steps is timed (ProfilingBackend: with the
// device's events where the backend has a timeline, else synchronizing after each op).
StepBenchmarkResult run_step_benchmark(const ModelConfig& model, std::int64_t batch,
                                       std::int64_t seq, int steps, int warmup,
                                       bool profile = false, Device device = Device::cpu,
                                       Precision precision = Precision::fp32);
// The same on a backend of the caller's (its memory tracker gives the peak). `events`: the
// profile times ops with the device's events where it has a timeline; false: with the host
// clock, synchronizing after each op, as before events (KINTSUGI_PROFILE_EVENTS=0).
StepBenchmarkResult run_step_benchmark(
    Backend& backend, const ModelConfig& model, std::int64_t batch, std::int64_t seq, int steps,
    int warmup, bool profile, Precision precision,
    bool events = Switches::process().on(Switch::profile_events));

}  // namespace kintsugi
