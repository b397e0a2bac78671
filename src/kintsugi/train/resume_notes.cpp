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

}  // namespace kintsugi
