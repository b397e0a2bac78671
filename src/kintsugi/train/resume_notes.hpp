#pragma once
// A resumed run may change train.steps (to train longer) and with it the learning-rate
// schedule, whose decay follows train.steps unless train.decay_steps is set. Checkpoints record
// the schedule of the run that saved them, and the resumed run says in its log what changed.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// The schedule the run follows (train.steps, and lr, min_lr, warmup_steps, decay_steps, the
// shape and wsd's decay fraction as lr_schedule_of resolves them) as JSON, for the checkpoint manifest's "layout" ("lr_schedule").
nlohmann::json lr_schedule_json(const TrainConfig& train);

// One log line per changed key and the learning rate at `step` under both schedules, when the
// checkpoint's layout record (`saved_layout`) holds a schedule that differs from `now`'s; none
// otherwise (also for checkpoints that predate the record).
std::vector<std::string> schedule_change_notes(const nlohmann::json& saved_layout,
                                               const TrainConfig& now, std::int64_t step);

// A batch ramp-up's record for the checkpoint manifest's "layout" ("batch_rampup"): the ramp
// [start, increment, samples], the global batch, the learning-rate rule, and the sequences
// consumed by steps 1..step ("samples_consumed"; the progress record's tokens_seen over seq_len).
nlohmann::json batch_rampup_json(const TrainConfig& train, const BatchSchedule& batches,
                                 std::int64_t step);

// Log lines for a resume into a ramp-up (`batches`, continued at `step`): where the ramp stands
// (the batch of the next step), and a note when the checkpoint's run consumed another count of
// sequences than this config's ramp would have by then (the ramp continues from the
// checkpoint's count, as Megatron-LM's calculator does from its consumed samples). None
// without a ramp.
std::vector<std::string> rampup_resume_notes(const nlohmann::json& saved_layout,
                                             const BatchSchedule& batches, std::int64_t step);

}  // namespace kintsugi
