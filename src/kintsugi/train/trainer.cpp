#include "kintsugi/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <csignal>
#include <ostream>

#include "kintsugi/comm/launch.hpp"
#include "kintsugi/train/evaluation.hpp"
#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/resume_notes.hpp"
#include "kintsugi/train/train_data.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

TrainingRun::TrainingRun(const RunConfig& config, TrainInputs& data, const TrainOptions& options,
                         std::ostream& log, const Topology* topology)
    : ctx_(config, data, options, log, topology), throughput_(ctx_.config) {
  summary_.metrics_path = options.metrics_path.empty() ? (ctx_.out / "metrics.jsonl").string()
                                                       : options.metrics_path;
  summary_.plot_path = (ctx_.out / "loss.svg").string();
  records_.curve.title = fmt::format("{} on {}", ctx_.config.model.name,
                                     describe_training_data(ctx_.config.data));
  // A stop signal is looked at before every micro-batch every rank runs, not only between
  // steps: a launcher gives a stopped job seconds, not a step's worth (docs/checkpoints.md).
  ctx_.model.set_stop_check([this](int mb) { return mb < progress_.stop_checks; });
}

TrainSummary TrainingRun::run() {
  restore();
  // Collective: every rank opens its counter.
  energy_.emplace(*ctx_.backend, ctx_.topology, ctx_.options.faults.powercap_root);
  announce();
  const std::int64_t start = progress_.start_step;
  if (ctx_.data.val && !initial_evaluation()) {
    stopped(start);
    summary_.steps = start;
    return summary_;
  }
  progress_.steps_done = start;
  const std::optional<RankStep>& kill_at = ctx_.options.faults.kill_rank;
  for (std::int64_t step = start; step < ctx_.tc.steps; ++step) {
    if (kill_at && ctx_.topology && ctx_.topology->world().rank() == kill_at->rank &&
        step == kill_at->step)
      std::raise(SIGKILL);  // a rank dying mid-run (tests: the job must end, not hang)
    std::optional<StepMetrics> m = train_step(step);
    if (!m) {  // stopped in the middle of the step: the last completed one is saved
      if (progress_.steps_done > start && progress_.saved_step != progress_.steps_done)
        save_on_stop(progress_.steps_done, progress_.last_val_loss);
      stopped(progress_.steps_done);
      break;
    }
    report(*m);
    progress_.steps_done = m->step;
    progress_.last_val_loss = m->val_loss;
    if (checkpoint_or_stop(*m)) break;
  }
  finish();
  return summary_;
}

// Weights and optimizer state: a checkpoint to resume, initial weights, or the random init
// the model was built with.
void TrainingRun::restore() {
  install_stop_handlers();
  StageModel& model = ctx_.model;
  if (ctx_.options.resume) {
    const CheckpointInfo& ckpt = *ctx_.options.resume;
    Stopwatch clock;
    load_train_checkpoint(ckpt, rank_state(model, ctx_.place));
    progress_.load_seconds = clock.seconds();
    // The loss scale carries over between fp16 runs; another precision starts its own.
    if (model.loss_scaler().enabled() &&
        ckpt.manifest.at("layout").value("precision", "") == name_of(Precision::fp16))
      model.loss_scaler().restore(ckpt.progress.loss_scaler);
    // Auxiliary-loss-free balancing's bias (docs/moe.md): the checkpoint's, or zero when it has
    // none (a run that did not balance so).
    if (!model.moe_router_bias().empty() && !ckpt.progress.moe_router_bias.empty())
      model.set_moe_router_bias(ckpt.progress.moe_router_bias);
    const std::int64_t start = progress_.start_step = ckpt.progress.step;
    KINTSUGI_ASSERT(start <= ctx_.tc.steps);  // `kintsugi train` refuses such a checkpoint
    // Recorded since checkpoints carry it; before, the run's own batches are the best guess.
    // A ramp-up continues from the sequences the checkpoint's run consumed
    // (train/batch_rampup.hpp): its tokens_seen over the sequence length, exact.
    const std::int64_t seq = ctx_.config.model.seq_len;
    const bool recorded = ckpt.progress.tokens_seen >= 0 && ckpt.progress.tokens_seen % seq == 0;
    ctx_.batches = BatchSchedule(ctx_.tc, start, recorded ? ckpt.progress.tokens_seen / seq : -1);
    for (const std::string& note :
         rampup_resume_notes(ckpt.manifest.at("layout"), ctx_.batches, start))
      progress_.resume_notes.push_back(note);
    for (std::int64_t step = 0; step < start; ++step) count_dataset_tokens(step);
  } else if (ctx_.options.init) {
    // Shapes are checked against this rank's parameters, before any is written; the ranks
    // agree on the verdict so that one of them reports a mismatch.
    std::string error;
    try {
      ctx_.options.init->set(rank_state(model, ctx_.place));
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_error(ctx_.world(), error);
  }
}

// The validation loss before the first step, as step 0 of metrics.jsonl and TensorBoard (a
// resumed run's first evaluation repeats the checkpoint step's, which is there already). False
// when a stop signal ended it.
bool TrainingRun::initial_evaluation() {
  const std::int64_t start = progress_.start_step;
  const auto initial = evaluate();
  if (!initial) return false;
  progress_.best_val = *initial;
  records_.curve.val.emplace_back(start, *initial);
  summary_.first_val_loss = summary_.last_val_loss = *initial;
  if (!ctx_.place.chief) return true;
  fmt::print(ctx_.log, "step {} | val loss {:.4f}\n", start, *initial);
  if (start == 0) records_.write_initial_evaluation(*initial);
  return true;
}

TrainInputs open_inputs(const RunConfig& config) {
  return {open_train_data(config), open_val_data(config)};
}

TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log) {
  return train(config, open_inputs(config), options, log);
}

TrainSummary train(const RunConfig& config, TrainInputs data, const TrainOptions& options,
                   std::ostream& log, const Topology* topology) {
  return TrainingRun(config, data, options, log, topology).run();
}

}  // namespace kintsugi
