#include "kintsugi/train/step_benchmark.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/rng.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/job_energy.hpp"
#include "kintsugi/train/stage_model.hpp"

namespace kintsugi {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

StepBenchmarkResult run_step_benchmark(const ModelConfig& config, std::int64_t batch,
                                       std::int64_t seq, int steps, int warmup, bool profile,
                                       Device device, Precision precision) {
  MemoryTracker memory;
  auto backend = make_backend(device, memory);
  return run_step_benchmark(*backend, config, batch, seq, steps, warmup, profile, precision);
}

StepBenchmarkResult run_step_benchmark(Backend& device_backend, const ModelConfig& config,
                                       std::int64_t batch, std::int64_t seq, int steps, int warmup,
                                       bool profile, Precision precision, bool events) {
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

  // Profiled or not, the model runs on the profiler: disabled, it passes ops straight through.
  ProfilingBackend profiler(device_backend, events);
  Backend& backend = profile ? static_cast<Backend&>(profiler) : device_backend;
  const Place place;
  Tracer tracer;
  StageModel model(backend, run, place, tracer);

  std::vector<std::int32_t> tokens(batch * seq + 1);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(7, 0, i, config.vocab_size));
  const auto sample = [&](int, std::int32_t* in, std::int32_t* out) {
    std::copy(tokens.begin(), tokens.end() - 1, in);
    std::copy(tokens.begin() + 1, tokens.end(), out);
  };
  const double scale = 1.0 / static_cast<double>(batch * seq);
  StepBenchmarkResult result;
  OpenedCounter energy = open_device_counter(device_backend);
  result.energy_source = energy.counter ? energy.counter->describe() : energy.why_not;
  double joules = 0;  // of the timed unprofiled steps
  bool energy_ok = energy.counter != nullptr;
  // The unprofiled steps' losses and gradient norms are kept (`record`).
  const auto timed_step = [&](bool record) {
    Stopwatch clock;
    // Returns after reading the loss: the step is done.
    const StageModel::StepResult step = model.train_step(sample, 1, scale, 1e-4, 1.0);
    const double seconds = clock.seconds();
    if (record) {
      result.losses.push_back(step.loss_sum * scale);
      result.grad_norms.push_back(step.grad_norm);
    }
    return seconds;
  };

  for (int s = 0; s < warmup + steps; ++s) {
    profiler.set_enabled(false);
    const std::optional<double> before = energy_ok ? energy.counter->joules() : std::nullopt;
    const double plain = timed_step(true);
    if (energy_ok && s >= warmup) {
      const std::optional<double> after = energy.counter->joules();
      energy_ok = before && after;
      if (energy_ok) joules += *after - *before;
    }
    if (s >= warmup) result.step_seconds.push_back(plain);
    if (!profile) continue;
    // Warm-up steps are profiled too: the timeline creates its events in the first.
    if (s == warmup) profiler.reset();
    profiler.set_enabled(true);
    profiler.begin_step();
    const double profiled = timed_step(false);
    profiler.end_step();  // reads the device's spans, after the step's clock stopped
    if (s >= warmup) result.profiled_step_seconds.push_back(profiled);
  }
  profiler.set_enabled(false);
  result.median_seconds = median(result.step_seconds);
  result.tokens_per_s = batch * seq / result.median_seconds;
  result.gflops = model_flops_per_token(config, seq) * batch * seq / result.median_seconds / 1e9;
  result.peak_memory_bytes = device_backend.memory().peak_total();
  if (energy_ok) result.joules_per_step = joules / static_cast<double>(steps);
  else if (energy.counter) result.energy_source += ": a read failed, no energy reported";
  if (profile) {
    result.profile_events = profiler.uses_events();
    result.profile_marks = profiler.marks();
    result.ops = profiler.profile();
    result.op_shapes = profiler.by_shape();
  }
  return result;
}

}  // namespace kintsugi
