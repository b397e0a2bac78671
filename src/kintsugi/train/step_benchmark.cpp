#include "kintsugi/train/step_benchmark.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/rng.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/stage_model.hpp"

namespace kintsugi {

StepBenchmarkResult run_step_benchmark(const ModelConfig& config, std::int64_t batch,
                                       std::int64_t seq, int steps, int warmup, bool profile,
                                       Device device, Precision precision) {
  if (seq > config.seq_len)
    fail("--seq {} exceeds the model's context length {}", seq, config.seq_len);
  if (batch <= 0 || seq <= 0 || steps <= 0 || warmup < 0)
    fail("--batch, --seq and --steps must be positive and --warmup not negative");
  // The training path itself, on one rank: one micro-batch of `batch` sequences per step.
  RunConfig run;
  run.model = config;
  run.model.seq_len = seq;
  run.train.global_batch = batch;
  run.train.micro_batch = batch;
  run.train.seed = 1;
  run.train.precision = precision;
  resolve_layout(run, 1);

  MemoryTracker memory;
  auto device_backend = make_backend(device, memory);
  std::unique_ptr<ProfilingBackend> profiler;
  if (profile) profiler = std::make_unique<ProfilingBackend>(*device_backend);
  Backend* backend = profile ? static_cast<Backend*>(profiler.get()) : device_backend.get();
  const Place place;
  Tracer tracer;
  StageModel model(*backend, run, place, tracer);

  std::vector<std::int32_t> tokens(batch * seq + 1);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(7, 0, i, config.vocab_size));
  const auto sample = [&](int, std::int32_t* in, std::int32_t* out) {
    std::copy(tokens.begin(), tokens.end() - 1, in);
    std::copy(tokens.begin() + 1, tokens.end(), out);
  };
  const double scale = 1.0 / static_cast<double>(batch * seq);

  StepBenchmarkResult result;
  for (int s = 0; s < warmup + steps; ++s) {
    if (profiler && s == warmup) profiler->reset();
    Stopwatch clock;
    // Returns after reading the loss: the step is done.
    const StageModel::StepResult step = model.train_step(sample, 1, scale, 1e-4, 1.0);
    result.losses.push_back(step.loss_sum * scale);
    result.grad_norms.push_back(step.grad_norm);
    if (s >= warmup) result.step_seconds.push_back(clock.seconds());
  }
  std::vector<double> sorted = result.step_seconds;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  result.median_seconds = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  result.tokens_per_s = batch * seq / result.median_seconds;
  result.gflops = model_flops_per_token(config, seq) * batch * seq / result.median_seconds / 1e9;
  result.peak_memory_bytes = memory.peak_total();
  if (profiler) result.ops = profiler->profile();
  return result;
}

}  // namespace kintsugi
