#pragma once
// A training run's rate against the hardware's: the model and hardware FLOPs of a step, the
// peak that MFU divides by (rank 0: measured, or metrics.peak_gflops) and the tokens per second
// over the steps that count (all but the first, which warms up).
#include <cstdint>
#include <iosfwd>
#include <optional>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/train/place.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/step_metrics.hpp"

namespace kintsugi {

class RunThroughput {
 public:
  explicit RunThroughput(const RunConfig& config);

  // Rank 0: the peak GEMM rate of one rank, metrics.peak_gflops or measured on `backend`.
  void measure_peak(const RunConfig& config, Backend& backend);
  // Rank 0, after measure_peak: the job's peak over its ranks (on the CPU the ranks of a node
  // share its cores), said on the log.
  void share_cores(const RunConfig& config, const Place& place, int ranks_per_node,
                   std::ostream& log);
  // A step's rates: tokens/s, model TFLOP/s and, with a peak, MFU and HFU. `of_full` is the
  // step's batch over the full global batch (a ramp-up's smaller batches do less work).
  void rate_step(StepMetrics& m, std::int64_t step_tokens, double of_full, double seconds,
                 const RunConfig& config, std::ostream& log);
  // Adds a timed step; returns the tokens per second over the timed steps so far.
  double time_step(double seconds, double tokens);
  // The run's MFU at `tokens_per_s`; 0 without a peak (ranks other than 0).
  double mfu(double tokens_per_s, std::int64_t tokens_per_step) const;

  double flops_per_step() const { return flops_per_step_; }

 private:
  double flops_per_step_ = 0, hardware_flops_per_step_ = 0;  // at the full global batch
  std::optional<GemmRate> peak_;                              // rank 0
  double core_share_ = 1.0, peak_total_gflops_ = 0;           // rank 0: the job's MFU peak
  bool peak_warned_ = false;  // rank 0: said once that MFU exceeds 100%
  double timed_seconds_ = 0, timed_tokens_ = 0;
};

}  // namespace kintsugi
