#include "kintsugi/train/run_throughput.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>
#include <thread>

#include "kintsugi/core/threads.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

RunThroughput::RunThroughput(const RunConfig& config) {
  const TrainConfig& tc = config.train;
  const double tokens = static_cast<double>(tc.global_batch * config.model.seq_len);
  flops_per_step_ = model_flops_per_token(config.model, config.model.seq_len) * tokens;
  // Hardware FLOPs count the forward work recomputation repeats (HFU; MFU does not).
  hardware_flops_per_step_ =
      hardware_flops_per_token(config.model, config.model.seq_len,
                               tc.recompute == Recompute::selective,
                               tc.recompute == Recompute::full) *
      tokens;
}

void RunThroughput::measure_peak(const RunConfig& config, Backend& backend) {
  const Precision precision = config.train.precision;
  peak_ = config.metrics.peak_gflops > 0
              ? GemmRate{config.metrics.peak_gflops, compute_threads(), 0, "",
                         peak_dtype(precision), "metrics.peak_gflops from the config"}
              : local_gemm_rate(backend, peak_dtype(precision));
}

void RunThroughput::share_cores(const RunConfig& config, const Place& place, int ranks_per_node,
                                std::ostream& log) {
  // On the CPU the ranks of a node share its cores: a rank's measured rate (one rank alone
  // on the machine, at its thread count) counts only for the share of the cores it has.
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double wanted = static_cast<double>(ranks_per_node) * compute_threads();
  core_share_ = config.train.device == Device::cpu ? std::min(1.0, cores / wanted) : 1.0;
  peak_total_gflops_ = peak_->gflops * place.world * core_share_;
  if (core_share_ < 1.0)
    fmt::print(log,
               "MFU peak: {:.1f} GFLOP/s per rank x {} ranks x {:.2f} ({} ranks x {} thread{} "
               "share {:.0f} cores on this node), {}\n",
               peak_->gflops, place.world, core_share_, ranks_per_node, compute_threads(),
               compute_threads() == 1 ? "" : "s", cores, peak_->source);
  else
    fmt::print(log, "MFU peak: {:.1f} GFLOP/s per rank x {} rank{}, {}\n", peak_->gflops,
               place.world, place.world == 1 ? "" : "s", peak_->source);
}

void RunThroughput::rate_step(StepMetrics& m, std::int64_t step_tokens, double of_full,
                              double seconds, const RunConfig& config, std::ostream& log) {
  m.tokens_per_s = static_cast<double>(step_tokens) / seconds;
  m.model_tflops = of_full * flops_per_step_ / seconds / 1e12;
  if (!peak_) return;
  m.mfu = of_full * flops_per_step_ / seconds / (peak_total_gflops_ * 1e9);
  m.hfu = of_full * hardware_flops_per_step_ / seconds / (peak_total_gflops_ * 1e9);
  // Above 100% the peak is wrong, not the run: a rate measured while other work shared the
  // cores under-reports the machine (docs/metrics.md, "MFU and the peak").
  if (m.mfu > 1.0 && !peak_warned_) {
    peak_warned_ = true;
    const bool configured = config.metrics.peak_gflops > 0;
    fmt::print(log,
               "note: MFU above 100%: this run does {:.1f} GFLOP/s, more than the peak it is "
               "divided by ({:.1f} GFLOP/s: {}); {}\n",
               m.model_tflops * 1e3, peak_total_gflops_, peak_->source,
               configured ? "raise metrics.peak_gflops"
                          : "a rate measured while the machine was busy is too low: run "
                            "`kintsugi bench gemm` on a quiet machine to measure it again");
  }
}

double RunThroughput::time_step(double seconds, double tokens) {
  timed_seconds_ += seconds;
  timed_tokens_ += tokens;
  return timed_tokens_ / timed_seconds_;
}

double RunThroughput::mfu(double tokens_per_s, std::int64_t tokens_per_step) const {
  if (!peak_) return 0;
  return tokens_per_s / static_cast<double>(tokens_per_step) * flops_per_step_ /
         (peak_total_gflops_ * 1e9);
}

}  // namespace kintsugi
