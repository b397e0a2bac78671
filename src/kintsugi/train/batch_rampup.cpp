#include "kintsugi/train/batch_rampup.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

BatchRampup batch_rampup_of(const TrainConfig& t) {
  const std::vector<std::int64_t>& v = t.batch_rampup;
  if (v.empty()) return {};
  if (v.size() != 3 || std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x < 1; }))
    fail("train.batch_rampup must be three positive whole numbers [start, increment, samples] "
         "(Megatron-LM's --rampup-batch-size), e.g. [32, 32, 1000000]; [] turns it off");
  const BatchRampup r{v[0], v[1], v[2]};
  if (r.start > t.global_batch)
    fail("train.batch_rampup starts at {} sequences, above train.global_batch = {}: the ramp "
         "grows the batch up to train.global_batch",
         r.start, t.global_batch);
  if ((t.global_batch - r.start) % r.increment != 0)
    fail("train.batch_rampup: train.global_batch {} - start {} = {} is not a multiple of the "
         "increment {}: the ramp must reach the global batch exactly",
         t.global_batch, r.start, t.global_batch - r.start, r.increment);
  return r;
}

std::int64_t ramped_batch(const BatchRampup& ramp, std::int64_t global_batch,
                          std::int64_t consumed) {
  if (!ramp.enabled() || consumed >= ramp.samples) return global_batch;
  const std::int64_t n = (global_batch - ramp.start) / ramp.increment;
  // c n may exceed 63 bits for a ramp of many samples and increments.
  const auto k = static_cast<std::int64_t>(static_cast<__int128>(consumed) * n / ramp.samples);
  return ramp.start + std::min(k, n) * ramp.increment;
}

std::int64_t steps_to_consume(const BatchRampup& ramp, std::int64_t global_batch,
                              std::int64_t sequences) {
  std::int64_t steps = 0, c = 0;
  while (c < sequences) {
    const std::int64_t b = ramped_batch(ramp, global_batch, c);
    // Where the batch next changes: the first c with floor(c n / samples) = k + 1, the next
    // phase of the ramp (ramped_batch), or never at the full batch. A phase at a time, not a
    // step: a budget can be millions of steps.
    std::int64_t next = sequences;
    if (b < global_batch) {
      const std::int64_t n = (global_batch - ramp.start) / ramp.increment;
      const std::int64_t k = (b - ramp.start) / ramp.increment;
      next = std::min(next, static_cast<std::int64_t>(
                                (static_cast<__int128>(k + 1) * ramp.samples + n - 1) / n));
    }
    const std::int64_t s = (next - c + b - 1) / b;
    steps += s;
    c += s * b;
  }
  return steps;
}

std::vector<std::int64_t> ramp_batches_to_check(const BatchRampup& ramp,
                                                std::int64_t global_batch) {
  if (!ramp.enabled() || ramp.start == global_batch) return {global_batch};
  if (ramp.start + ramp.increment == global_batch) return {ramp.start, global_batch};
  return {ramp.start, ramp.start + ramp.increment, global_batch};
}

BatchLrRule batch_lr_rule_of(const std::string& name) {
  if (name == "none") return BatchLrRule::none;
  if (name == "sqrt") return BatchLrRule::sqrt;
  if (name == "linear") return BatchLrRule::linear;
  fail("train.batch_lr_rule = \"{}\" must be \"none\", \"sqrt\" or \"linear\"", name);
}

double batch_lr_factor(BatchLrRule rule, std::int64_t batch, std::int64_t global_batch) {
  const double ratio = static_cast<double>(batch) / static_cast<double>(global_batch);
  switch (rule) {
    case BatchLrRule::none: return 1.0;
    case BatchLrRule::sqrt: return std::sqrt(ratio);
    case BatchLrRule::linear: return ratio;
  }
  return 1.0;
}

BatchSchedule::BatchSchedule(const TrainConfig& t, std::int64_t start_step,
                             std::int64_t consumed_at_start)
    : ramp_(batch_rampup_of(t)), global_batch_(t.global_batch), steps_(t.steps) {
  KINTSUGI_ASSERT(start_step >= 0 && start_step <= steps_);
  replayed_at_start_ = walk({}, start_step).consumed;
  start_ = {start_step, consumed_at_start >= 0 ? consumed_at_start : replayed_at_start_};
  cursor_ = start_;
}

std::int64_t BatchSchedule::steps_at_this_batch(const Point& from, std::int64_t limit) const {
  const std::int64_t n = ramp_.enabled() ? (global_batch_ - ramp_.start) / ramp_.increment : 0;
  if (n == 0 || from.consumed >= ramp_.samples) return limit;  // the full batch from here on
  // The next increment comes at the first count c with floor(c n / samples) = k + 1.
  const auto k = static_cast<std::int64_t>(static_cast<__int128>(from.consumed) * n /
                                           ramp_.samples);
  const auto next = static_cast<std::int64_t>(
      (static_cast<__int128>(k + 1) * ramp_.samples + n - 1) / n);
  const std::int64_t batch = ramp_.start + k * ramp_.increment;
  return std::min(limit, (next - from.consumed + batch - 1) / batch);
}

BatchSchedule::Point BatchSchedule::walk(Point from, std::int64_t step) const {
  KINTSUGI_ASSERT(from.step <= step);
  while (from.step < step) {
    const std::int64_t batch = ramped_batch(ramp_, global_batch_, from.consumed);
    const std::int64_t m = steps_at_this_batch(from, step - from.step);
    from.consumed += m * batch;
    from.step += m;
  }
  return from;
}

BatchSchedule::Point BatchSchedule::origin_of(std::int64_t step) const {
  // Before start_step the run replays the ramp from step 0; from it on, it goes on from start_.
  const Point origin = step >= start_.step ? start_ : Point{};
  return cursor_.step >= origin.step && cursor_.step <= step ? cursor_ : origin;
}

std::int64_t BatchSchedule::consumed_before(std::int64_t step) const {
  KINTSUGI_ASSERT(step >= 0 && step <= steps_);
  cursor_ = walk(origin_of(step), step);
  return cursor_.consumed;
}

std::int64_t BatchSchedule::batch(std::int64_t step) const {
  KINTSUGI_ASSERT(step >= 0 && step < steps_);
  return ramped_batch(ramp_, global_batch_, consumed_before(step));
}

std::int64_t BatchSchedule::next_batch_change(std::int64_t step) const {
  const std::int64_t batch = this->batch(step);
  Point p{step, consumed_before(step)};
  do {
    // The batch may also change where the run continues from a checkpoint's count.
    const std::int64_t end = p.step < start_.step ? start_.step : steps_;
    p = walk(p, p.step + steps_at_this_batch(p, end - p.step));
    if (p.step == start_.step) p = start_;
  } while (p.step < steps_ && ramped_batch(ramp_, global_batch_, p.consumed) == batch);
  return p.step;
}

std::int64_t BatchSchedule::first_full_step() const {
  for (std::int64_t s = 0; s < steps_; s = next_batch_change(s))
    if (batch(s) == global_batch_) return s;
  return steps_;
}

}  // namespace kintsugi
