// TrainingRun's reports (training_run.hpp): after every step, its evaluation when due, memory,
// the loss curve, throughput, the metrics line and the log line; at the end, the trained model
// (with its tokenizer), the loss and learning-rate plots and the summary lines.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <sys/resource.h>

#include <algorithm>
#include <ostream>

#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

namespace {

// data.tokenizer's files next to the saved model, so that `generate` and `export` find them
// from any directory; a tokenizer that cannot be loaded is reported, not fatal.
void save_tokenizer(const RunConfig& config, const std::string& dir, std::ostream& log) {
  try {
    data::load_tokenizer(config.data.tokenizer, "data.tokenizer")->save(dir, config.model.seq_len);
  } catch (const Error& e) {
    fmt::print(log, "note: no tokenizer saved with the model ({})\n", e.what());
  }
}

// The tracked peak counts kintsugi's tensors (docs/metrics.md, "Memory categories"); on the
// CPU the process also holds its code, the MPI library's and OpenBLAS's buffers and what
// malloc keeps, which the resident-set peak includes: said after the tracked peak.
std::string resident_set_note(Device device) {
  if (device != Device::cpu) return "";
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return "";
  return fmt::format(" (tensors; process peak RSS {}: also code, MPI and BLAS buffers, "
                     "freed memory malloc keeps)",
                     format_bytes(static_cast<std::size_t>(usage.ru_maxrss) * 1024));
}

}  // namespace

// Training tokens of steps 1..step: the resumed steps at the batch they had, this run's at its.
std::int64_t TrainingRun::tokens_seen_after(std::int64_t step) const {
  return ctx_.batches.consumed_before(step) * ctx_.config.model.seq_len;
}

// Evaluation when due, memory, the loss curve, throughput, the metrics line and the log.
void TrainingRun::report(StepMetrics& m) {
  const TrainConfig& tc = ctx_.tc;
  const std::int64_t start = progress_.start_step;
  const bool last = m.step == tc.steps;
  if (ctx_.data.val && (last || (tc.eval_every > 0 && m.step % tc.eval_every == 0))) {
    m.val_loss = evaluate();  // none if stopped: the step is saved at its boundary
    if (m.val_loss) {
      records_.curve.val.emplace_back(m.step, *m.val_loss);
      summary_.last_val_loss = *m.val_loss;
      if (!diverged(*m.val_loss)) progress_.best_val = std::min(progress_.best_val, *m.val_loss);
    }
  }
  for (int k = 0; k < kMemoryKinds; ++k) {
    m.memory_current[k] = ctx_.memory.current(static_cast<MemoryKind>(k));
    m.memory_peak[k] = ctx_.memory.peak(static_cast<MemoryKind>(k));
  }
  m.activations_in_flight = ctx_.model.peak_in_flight();
  m.tokens_seen = tokens_seen_after(m.step);
  m.samples_seen = ctx_.batches.consumed_before(m.step);
  m.elapsed_seconds = run_clock_.seconds();
  records_.curve.train.emplace_back(m.step, m.loss);
  if (m.step == start + 1) summary_.first_loss = m.loss;
  summary_.last_loss = m.loss;
  // Throughput over every step but the first (warm-up), unless there is only one.
  if (m.step > start + 1 || tc.steps - start == 1)
    summary_.tokens_per_s = throughput_.time_step(
        m.step_seconds, static_cast<double>(m.global_batch * ctx_.config.model.seq_len));
  if (!ctx_.place.chief) return;
  records_.write(m);
  if (m.step % tc.log_every == 0 || last || m.val_loss) {
    const double eta = run_clock_.seconds() / static_cast<double>(m.step - start) *
                       static_cast<double>(tc.steps - m.step);
    fmt::print(ctx_.log, "{}\n", format_step_line(m, tc.steps, eta));
    ctx_.log.flush();
  }
}

// The trained model (gathered to rank 0 from data-parallel replica 0's stages), the loss
// curve and the summary line.
void TrainingRun::finish() {
  summary_.steps = progress_.steps_done;
  summary_.mfu = throughput_.mfu(summary_.tokens_per_s, ctx_.tokens_per_step);
  if (ctx_.tc.save_checkpoint && !summary_.stopped) save_model_and_tokenizer();
  if (!ctx_.place.chief) return;
  // This run's evaluations, before the earlier run's join the curve.
  const std::string val = records_.val_summary(progress_.steps_done);
  if (ctx_.options.resume)
    add_earlier_steps(records_.curve, summary_.metrics_path, progress_.start_step);
  write_loss_svg(summary_.plot_path, records_.curve);
  const std::string lr_plot = (ctx_.out / "lr.svg").string();
  write_lr_svg(lr_plot, ctx_.schedule, ctx_.tc.steps,
               fmt::format("learning rate: {} schedule, {} steps", name_of(ctx_.schedule.shape),
                           ctx_.tc.steps));
  print_summary(val, lr_plot);
}

// The model to out/model/: ZeRO-3 gathers weights from the whole data-parallel group, so every
// rank takes part; replica 0's ranks write (context parallelism's cp rank 0 of them: the others
// hold the same weights), and rank 0 adds the tokenizer.
void TrainingRun::save_model_and_tokenizer() {
  StageModel& model = ctx_.model;
  model.acquire_all_params();
  // Expert parallelism: the ep ranks of replica 0 hold its experts between them (dp ranks
  // 0..ep-1, whose edp rank is 0), and send them to dp rank 0 (save_model).
  const Place& place = ctx_.place;
  const bool writer = place.edp ? place.edp->rank() == 0 : place.dp_rank == 0;
  if (writer && place.cp_rank == 0) {
    if (place.dp_rank == 0) summary_.checkpoint_dir = (ctx_.out / "model").string();
    save_model((ctx_.out / "model").string(), ctx_.config.model, model.chunk_params(),
               progress_.steps_done, place.tp, place.pp, model.virtual_stages(),
               ctx_.options.tokenizer, std::nullopt, model.expert_params(), place.ep,
               model.moe_router_bias());
  }
  model.release_all_params();
  if (ctx_.place.chief && !summary_.checkpoint_dir.empty())
    save_tokenizer(ctx_.config, summary_.checkpoint_dir, ctx_.log);
}

// The run's last two log lines: what it did, and the files it wrote.
void TrainingRun::print_summary(const std::string& val, const std::string& lr_plot) {
  const std::int64_t done = progress_.steps_done, steps = done - progress_.start_step;
  fmt::print(ctx_.log,
             "{}: {} step{} in {} | loss {:.4f} -> {:.4f} | {} | "
             "{:.0f} tok/s, MFU {:.1f}% | peak memory {} per rank{}\n",
             summary_.stopped ? fmt::format("stopped by a signal at step {}", done) : "done",
             steps, steps == 1 ? "" : "s", format_duration(run_clock_.seconds()),
             summary_.first_loss, summary_.last_loss, val, summary_.tokens_per_s,
             100 * summary_.mfu, format_bytes(ctx_.memory.peak_total()),
             resident_set_note(ctx_.tc.device));
  const std::string& trace = ctx_.options.trace_path;
  fmt::print(ctx_.log, "wrote {}, {} and {}{}{}{}\n", summary_.metrics_path, summary_.plot_path,
             lr_plot, summary_.checkpoint_dir.empty() ? "" : " and " + summary_.checkpoint_dir,
             trace.empty() ? "" : " and " + trace,
             records_.tensorboard ? " and " + records_.tensorboard->path() : "");
}

}  // namespace kintsugi
