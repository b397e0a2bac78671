#include "kintsugi/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cmath>
#include <filesystem>
#include <ostream>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/optim/adamw.hpp"
#include "kintsugi/optim/grad_clip.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/step_metrics.hpp"

namespace kintsugi {

namespace {

data::BatchSampler open_sampler(const std::string& path, const char* key,
                                const RunConfig& config) {
  auto file = data::TokenFile::open(path);
  if (file.vocab_size() > config.model.vocab_size)
    fail("{} was tokenized with a vocabulary of {} but model.vocab_size is {}: set {} or use a "
         "matching token file",
         path, file.vocab_size(), config.model.vocab_size, key);
  return data::BatchSampler(std::move(file), config.model.seq_len,
                            static_cast<std::uint64_t>(config.train.seed));
}

// Mean validation loss over eval_batches micro-batches of evenly spread windows.
double evaluate(GptModel& model, const data::BatchSampler& val, std::int64_t eval_batches,
                std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) {
  const std::int64_t mb = model.micro_batch(), T = model.seq();
  const std::int64_t windows = eval_batches * mb;
  double sum = 0;
  for (std::int64_t b = 0; b < eval_batches; ++b) {
    for (std::int64_t i = 0; i < mb; ++i)
      val.eval_window(b * mb + i, windows, inputs.data() + i * T, targets.data() + i * T);
    sum += model.forward_loss(inputs.data(), targets.data());
  }
  return sum / static_cast<double>(windows * T);
}

void snapshot_memory(const MemoryTracker& memory, StepMetrics& m) {
  for (int k = 0; k < kMemoryKinds; ++k) {
    m.memory_current[k] = memory.current(static_cast<MemoryKind>(k));
    m.memory_peak[k] = memory.peak(static_cast<MemoryKind>(k));
  }
}

}  // namespace

TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log) {
  const TrainConfig& tc = config.train;
  const ModelConfig& mc = config.model;
  set_compute_threads(static_cast<int>(tc.threads));
  const std::int64_t T = mc.seq_len, mb = tc.micro_batch;
  const std::int64_t micro_batches = tc.global_batch / mb;
  const std::int64_t tokens_per_step = tc.global_batch * T;

  // Inputs first: a missing file should fail before minutes of initialization.
  auto train_data = open_sampler(config.data.train, "data.train", config);
  auto val_data = open_sampler(config.data.val, "data.val", config);
  const GemmRate peak = config.metrics.peak_gflops > 0
                            ? GemmRate{config.metrics.peak_gflops, compute_threads(), 0, "",
                                       "metrics.peak_gflops from the config"}
                            : local_gemm_rate();

  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  GptModel model(*backend, mc, DType::f32, mb, T);
  model.params().initialize(static_cast<std::uint64_t>(tc.seed));
  AdamW optimizer(*backend, model.params(),
                  {.beta1 = tc.beta1, .beta2 = tc.beta2, .eps = tc.eps,
                   .weight_decay = tc.weight_decay});
  const LrSchedule schedule{tc.lr, tc.min_lr, tc.warmup_steps, tc.decay_steps};
  const double flops_per_step = model_flops_per_token(mc, T) * static_cast<double>(tokens_per_step);

  namespace fs = std::filesystem;
  const fs::path out = options.out_dir;
  fs::create_directories(out);
  TrainSummary summary;
  summary.metrics_path =
      options.metrics_path.empty() ? (out / "metrics.jsonl").string() : options.metrics_path;
  summary.plot_path = (out / "loss.svg").string();
  MetricsWriter metrics(summary.metrics_path);

  fmt::print(log,
             "kintsugi train | {} | model {} ({} layers, d {}, {} heads, {:.2f}M parameters) | "
             "{} threads, {} backend\n",
             config.source, mc.name, mc.n_layer, mc.d_model, mc.n_head,
             parameter_count(mc) / 1e6, compute_threads(), backend->name());
  fmt::print(log,
             "layout: 1 rank (serial) | global batch {} x {} tokens = {} tokens/step, {} "
             "micro-batches of {} | {:.3f} GFLOP/step (model FLOPs)\n",
             tc.global_batch, T, tokens_per_step, micro_batches, mb, flops_per_step / 1e9);
  fmt::print(log, "data: train {} ({} tokens), val {} ({} tokens)\n", config.data.train,
             train_data.tokens().size(), config.data.val, val_data.tokens().size());
  fmt::print(log, "MFU peak: {:.1f} GFLOP/s, {}\n", peak.gflops, peak.source);

  std::vector<std::int32_t> inputs(mb * T), targets(mb * T);
  LossCurve curve{.title = fmt::format("{} on {}", mc.name, config.data.train)};
  const double initial_val = evaluate(model, val_data, tc.eval_batches, inputs, targets);
  curve.val.emplace_back(0, initial_val);
  summary.first_val_loss = summary.last_val_loss = initial_val;
  fmt::print(log, "step {} | val loss {:.4f}\n", 0, initial_val);

  double timed_seconds = 0;
  Stopwatch run_clock;
  for (std::int64_t step = 0; step < tc.steps; ++step) {
    Stopwatch step_clock;
    ParamStore& params = model.params();
    params.begin_step();
    double loss_sum = 0;
    for (std::int64_t k = 0; k < micro_batches; ++k) {
      train_data.sample(step, k * mb, mb, inputs.data(), targets.data());
      loss_sum += model.forward_backward(inputs.data(), targets.data(),
                                         1.0 / static_cast<double>(tokens_per_step));
    }
    params.zero_unwritten_grads();
    const double grad_norm = std::sqrt(backend->sum_squares(params.grads()));
    const double lr = schedule.at(step);
    optimizer.step(lr, clip_factor(grad_norm, tc.grad_clip));
    const double seconds = step_clock.seconds();

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss_sum / static_cast<double>(tokens_per_step);
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_seconds = seconds;
    m.tokens_per_s = tokens_per_step / seconds;
    m.model_tflops = flops_per_step / seconds / 1e12;
    m.mfu = flops_per_step / seconds / (peak.gflops * 1e9);
    if (!std::isfinite(m.loss))
      fail("the loss became {} at step {}: lower train.lr or raise train.warmup_steps",
           m.loss, m.step);
    const bool last = step + 1 == tc.steps;
    if (last || (tc.eval_every > 0 && m.step % tc.eval_every == 0)) {
      m.val_loss = evaluate(model, val_data, tc.eval_batches, inputs, targets);
      curve.val.emplace_back(m.step, *m.val_loss);
      summary.last_val_loss = *m.val_loss;
    }
    snapshot_memory(memory, m);
    metrics.write(m);
    curve.train.emplace_back(m.step, m.loss);
    if (step == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (step > 0 || tc.steps == 1) {
      timed_seconds += seconds;
      summary.tokens_per_s = tokens_per_step * (tc.steps == 1 ? 1 : step) / timed_seconds;
    }
    if (m.step % tc.log_every == 0 || last || m.val_loss) {
      const double eta = run_clock.seconds() / m.step * (tc.steps - m.step);
      fmt::print(log, "{}\n", format_step_line(m, tc.steps, eta));
      log.flush();
    }
  }
  summary.steps = tc.steps;
  summary.mfu = summary.tokens_per_s / tokens_per_step * flops_per_step / (peak.gflops * 1e9);
  write_loss_svg(summary.plot_path, curve);
  if (tc.save_checkpoint) {
    summary.checkpoint_dir = (out / "model").string();
    save_model(summary.checkpoint_dir, mc, model.params(), tc.steps);
  }
  fmt::print(log,
             "done: {} steps in {} | loss {:.4f} -> {:.4f} | val loss {:.4f} -> {:.4f} | "
             "{:.0f} tok/s, MFU {:.1f}% | peak memory {}\n",
             tc.steps, format_duration(run_clock.seconds()), summary.first_loss,
             summary.last_loss, summary.first_val_loss, summary.last_val_loss,
             summary.tokens_per_s, 100 * summary.mfu, format_bytes(memory.peak_total()));
  fmt::print(log, "wrote {} and {}{}\n", summary.metrics_path, summary.plot_path,
             summary.checkpoint_dir.empty() ? "" : " and " + summary.checkpoint_dir);
  return summary;
}

}  // namespace kintsugi
