// TrainingRun's validation (training_run.hpp): the evaluation of every eval_every steps, the
// quick one of a save that has none, and the divergence check that keeps a diverged state
// from ever being saved.
#include <fmt/format.h>

#include <cmath>

#include "kintsugi/comm/launch.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/train/evaluation.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

// The fault hook's delay of every evaluation micro-batch after the first step.
int TrainingRun::eval_delay_ms() const {
  const auto& slow = ctx_.options.faults.slow_micro_batches;
  return slow && slow->evaluation && progress_.steps_done > progress_.start_step ? slow->ms : 0;
}

// Validation loss per token: eval_sequences_of evenly spread windows (the same set whatever
// the layout), in micro-batches shared out round-robin across the data-parallel ranks; none
// when a stop signal ended it.
std::optional<double> TrainingRun::evaluate() {
  const TrainConfig& tc = ctx_.tc;
  const std::int64_t windows = eval_sequences_of(tc);
  const std::int64_t batches = (windows + tc.micro_batch - 1) / tc.micro_batch;
  progress_.stop_checks = static_cast<int>(batches / ctx_.place.dp_size);  // every rank has these
  const int delay = eval_delay_ms();
  return mean_window_loss(ctx_.model, ctx_.place, *ctx_.data.val, windows, tc.micro_batch,
                          [delay] { sleep_ms(delay); });
}

// The validation loss of one micro-batch per data-parallel rank, which no stop signal cuts
// short: the check of a save on a stop signal (a launcher gives the job seconds, not an
// evaluation's worth) and of one whose evaluation a signal ended. A diverged state's loss is
// far above both bounds of diverged(), so a small sample tells it apart.
double TrainingRun::quick_validation_loss() {
  progress_.stop_checks = 0;  // no micro-batch looks for a stop signal
  const int delay = eval_delay_ms();
  const std::int64_t mb = ctx_.tc.micro_batch;
  const auto loss = mean_window_loss(ctx_.model, ctx_.place, *ctx_.data.val,
                                     ctx_.place.dp_size * mb, mb, [delay] { sleep_ms(delay); });
  KINTSUGI_ASSERT(loss.has_value());
  return *loss;
}

// Whether a validation loss says the run diverged: not finite, or worse than a uniform guess
// over the vocabulary (ln V) and more than 1.5 x the best this run has seen.
bool TrainingRun::diverged(double val) const {
  const double uniform = std::log(static_cast<double>(ctx_.config.model.vocab_size));
  return !std::isfinite(val) || (val > uniform && val > 1.5 * progress_.best_val);
}

// Before every save: the weights about to be saved are those after step `step`'s update,
// which its training loss has not seen, so their validation loss decides: `val` (the step's
// own evaluation, or one measured for the save), else the quick one above. A diverged state
// is never saved, so `latest` and the newest checkpoints that pruning keeps are sound ones.
void TrainingRun::refuse_diverged(std::int64_t step, std::optional<double> val) {
  if (!ctx_.data.val) return;  // without validation data only the save's finite checks remain
  if (!val) val = quick_validation_loss();
  if (!diverged(*val)) return;
  std::string last = summary_.last_train_checkpoint;
  if (last.empty() && ctx_.options.resume) last = ctx_.options.resume->dir.string();
  agree_on_error(ctx_.world(),
                 fmt::format("the run diverged: after step {} the validation loss is {:.4g} "
                             "(best {:.4g}, a uniform guess {:.4g}); step {} was not saved; "
                             "{}: lower train.lr or raise train.warmup_steps",
                             step, *val, progress_.best_val,
                             std::log(static_cast<double>(ctx_.config.model.vocab_size)), step,
                             last.empty() ? "no checkpoint was saved" : "resume from " + last));
}

}  // namespace kintsugi
