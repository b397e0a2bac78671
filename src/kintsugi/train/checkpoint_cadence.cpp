// TrainingRun's training checkpoints (training_run.hpp): at each step boundary, one when
// train.save_every says so or when any rank of the job was asked to stop (SIGTERM/SIGINT),
// each vouched for by a validation loss first; and what the log says when the run stops.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <ostream>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/resume_notes.hpp"
#include "kintsugi/train/run_description.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/evaluation.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

namespace {

// Whether any rank of the job received SIGTERM/SIGINT: every rank must take the same decision
// at the same step boundary, or the ones that go on would wait for the ones that stopped.
bool job_asked_to_stop(const Place& place, bool this_rank_must_stop = false) {
  double flag = stop_requested() || this_rank_must_stop ? 1.0 : 0.0;
  if (place.topology) flag = place.topology->world().host_all_reduce(flag);
  return flag > 0;
}

}  // namespace

// Step boundary: a checkpoint when due or when the job is asked to stop. Returns whether to
// stop.
bool TrainingRun::checkpoint_or_stop(const StepMetrics& m) {
  const TrainConfig& tc = ctx_.tc;
  const std::string& write_error = records_.write_error;
  const bool stop = job_asked_to_stop(ctx_.place, !write_error.empty());
  const bool due = tc.save_every > 0 && (m.step % tc.save_every == 0 || m.step == tc.steps);
  if (stop) {
    save_on_stop(m.step, m.val_loss);
  } else if (due) {
    // An evaluation cut short by a signal that came meanwhile leaves the quick check.
    refuse_diverged(m.step, m.val_loss ? m.val_loss : evaluate());
    save_checkpoint(m.step, tc.keep_checkpoints);
  }
  if (!write_error.empty())
    fail("{}; stopped after step {} (saved {})", write_error, m.step,
         summary_.last_train_checkpoint);
  if (stop) stopped(m.step);
  return stop;
}

// The save when the job is asked to stop: the same checks as a scheduled save, with the
// quick validation loss when the step has none of its own. It prunes nothing: the
// checkpoints before it stay until the next scheduled save, whose evaluation vouches for its
// state with the whole validation sample (docs/checkpoints.md).
void TrainingRun::save_on_stop(std::int64_t step, std::optional<double> val) {
  refuse_diverged(step, val);
  save_checkpoint(step, 0);
}

// A training checkpoint of the state after `step` (the weights and optimizer state now),
// keeping the newest `keep` checkpoints (0: all).
void TrainingRun::save_checkpoint(std::int64_t step, std::int64_t keep) {
  const TrainConfig& tc = ctx_.tc;
  StageModel& model = ctx_.model;
  const TrainProgress progress{.step = step,
                               .optimizer_steps = model.state(0).optimizer().steps_taken(),
                               .loss_scaler = model.loss_scaler().state(),
                               .seed = tc.seed,
                               .tokens_seen = tokens_seen_after(step),
                               .moe_router_bias = model.moe_router_bias()};
  nlohmann::json layout = layout_json(ctx_.config, ctx_.place);
  layout["lr_schedule"] = lr_schedule_json(tc);  // a resumed run says what it changes
  if (ctx_.batches.ramped()) layout["batch_rampup"] = batch_rampup_json(tc, ctx_.batches, step);
  Stopwatch clock;
  progress_.saved_step = step;
  summary_.last_train_checkpoint =
      save_train_checkpoint(ctx_.out / "checkpoints", ctx_.config.model, layout, progress,
                            rank_state(model, ctx_.place), keep, ctx_.options.tokenizer,
                            ctx_.options.faults.die_in_save)
          .string();
  if (ctx_.place.chief)
    fmt::print(ctx_.log, "saved checkpoint {} in {:.2f} s\n", summary_.last_train_checkpoint,
               clock.seconds());
}

// The run ends after `step` because a stop signal arrived.
void TrainingRun::stopped(std::int64_t step) {
  summary_.stopped = true;
  if (!ctx_.place.chief) return;
  if (summary_.last_train_checkpoint.empty() && ctx_.options.resume)
    summary_.last_train_checkpoint = ctx_.options.resume->dir.string();
  if (summary_.last_train_checkpoint.empty())
    fmt::print(ctx_.log, "stopped by a signal before the first step ended: nothing to save\n");
  else
    fmt::print(ctx_.log,
               "stopped by a signal after step {}: continue with --resume auto (or "
               "--resume {})\n",
               step, summary_.last_train_checkpoint);
  ctx_.log.flush();
}

}  // namespace kintsugi
