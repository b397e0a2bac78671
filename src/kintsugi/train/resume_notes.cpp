#include "kintsugi/train/resume_notes.hpp"

#include <fmt/format.h>

#include "kintsugi/optim/lr_schedule.hpp"

namespace kintsugi {

nlohmann::json lr_schedule_json(const TrainConfig& t) {
  const LrSchedule s = lr_schedule_of(t);  // what the run follows, unset keys resolved
  return {{"steps", t.steps},
          {"lr", s.max_lr},
          {"min_lr", s.min_lr},
          {"warmup_steps", s.warmup_steps},
          {"decay_steps", s.decay_steps},
          {"lr_schedule", std::string(name_of(s.shape))},
          {"lr_decay_fraction", s.decay_fraction}};
}

std::vector<std::string> schedule_change_notes(const nlohmann::json& saved_layout,
                                               const TrainConfig& now, std::int64_t step) {
  std::vector<std::string> notes;
  if (!saved_layout.contains("lr_schedule")) return notes;
  const nlohmann::json& then = saved_layout.at("lr_schedule");
  const nlohmann::json current = lr_schedule_json(now);
  std::string changes;
  for (const char* key : {"steps", "lr", "min_lr", "warmup_steps", "decay_steps", "lr_schedule",
                          "lr_decay_fraction"}) {
    if (!then.contains(key) || then.at(key) == current.at(key)) continue;
    changes += fmt::format("{}train.{} {} -> {}", changes.empty() ? "" : ", ", key,
                           then.at(key).dump(), current.at(key).dump());
  }
  if (changes.empty()) return notes;
  const LrSchedule after = lr_schedule_of(now);
  // Checkpoints written before the schedule had a name followed the cosine.
  const LrSchedule before{
      .max_lr = then.value("lr", after.max_lr),
      .min_lr = then.value("min_lr", after.min_lr),
      .warmup_steps = then.value("warmup_steps", after.warmup_steps),
      .decay_steps = then.value("decay_steps", after.decay_steps),
      .shape = parse_name<LrShape>(then.value("lr_schedule", std::string("cosine")),
                                   "the checkpoint's lr_schedule"),
      .decay_fraction = then.value("lr_decay_fraction", after.decay_fraction)};
  notes.push_back(fmt::format(
      "note: the learning-rate schedule differs from the checkpoint's run ({}): from step {} "
      "the learning rate follows the new one ({:.3e} at step {}, where the old one had {:.3e})",
      changes, step, after.at(step), step + 1, before.at(step)));
  return notes;
}

nlohmann::json batch_rampup_json(const TrainConfig& t, const BatchSchedule& batches,
                                 std::int64_t step) {
  const BatchRampup& r = batches.ramp();
  return {{"start", r.start},
          {"increment", r.increment},
          {"samples", r.samples},
          {"global_batch", t.global_batch},
          {"lr_rule", t.batch_lr_rule},
          {"samples_consumed", batches.consumed_before(step)}};
}

std::vector<std::string> rampup_resume_notes(const nlohmann::json& saved_layout,
                                             const BatchSchedule& batches, std::int64_t step) {
  std::vector<std::string> notes;
  if (!batches.ramped() && !saved_layout.contains("batch_rampup")) return notes;
  const std::int64_t consumed = batches.consumed_before(step);
  if (consumed != batches.replayed_consumed_at_start())
    notes.push_back(fmt::format(
        "note: the checkpoint's run consumed {} sequences in its {} steps, this config's batches "
        "would have consumed {}: the batch ramp-up continues from the checkpoint's {}",
        consumed, step, batches.replayed_consumed_at_start(), consumed));
  if (!batches.ramped()) {
    notes.push_back("note: the checkpoint's run ramped its batch up; this run does not "
                    "(train.batch_rampup = []): every step takes train.global_batch");
    return notes;
  }
  const std::int64_t full = batches.first_full_step();
  if (step >= batches.steps()) return notes;  // nothing left to train
  notes.push_back(
      step >= full
          ? fmt::format("batch ramp-up: done before step {} ({} sequences consumed)", step + 1,
                        consumed)
          : fmt::format("batch ramp-up: {} sequences consumed, step {} takes {} sequences; the "
                        "full batch of {} from step {}",
                        consumed, step + 1, batches.batch(step), batches.max_batch(), full + 1));
  return notes;
}

}  // namespace kintsugi
