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

std::vector<std::int64_t> ramp_batches(const BatchRampup& ramp, std::int64_t global_batch) {
  if (!ramp.enabled()) return {global_batch};
  std::vector<std::int64_t> out;
  for (std::int64_t b = ramp.start; b <= global_batch; b += ramp.increment) out.push_back(b);
  return out;
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
  batch_.resize(static_cast<std::size_t>(steps_));
  consumed_.resize(static_cast<std::size_t>(steps_) + 1);
  std::int64_t c = 0;
  for (std::int64_t s = 0; s < steps_; ++s) {
    if (s == start_step) {
      replayed_at_start_ = c;
      if (consumed_at_start >= 0) c = consumed_at_start;
    }
    consumed_[static_cast<std::size_t>(s)] = c;
    batch_[static_cast<std::size_t>(s)] = ramped_batch(ramp_, global_batch_, c);
    c += batch_[static_cast<std::size_t>(s)];
  }
  if (start_step == steps_) {
    replayed_at_start_ = c;
    if (consumed_at_start >= 0) c = consumed_at_start;
  }
  consumed_[static_cast<std::size_t>(steps_)] = c;
}

std::int64_t BatchSchedule::batch(std::int64_t step) const {
  KINTSUGI_ASSERT(step >= 0 && step < steps_);
  return batch_[static_cast<std::size_t>(step)];
}

std::int64_t BatchSchedule::consumed_before(std::int64_t step) const {
  KINTSUGI_ASSERT(step >= 0 && step <= steps_);
  return consumed_[static_cast<std::size_t>(step)];
}

std::int64_t BatchSchedule::first_full_step() const {
  for (std::int64_t s = 0; s < steps_; ++s)
    if (batch_[static_cast<std::size_t>(s)] == global_batch_) return s;
  return steps_;
}

}  // namespace kintsugi
