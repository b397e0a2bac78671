#pragma once
// Loss on evenly spread windows of a token file, in any layout: what `kintsugi train` reports
// as its validation loss and `kintsugi eval` prints, computed by one function so that the two
// agree.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/train/place.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/stage_model.hpp"

namespace kintsugi {

// This rank's weights and optimizer state, as the checkpoint code sees them.
RankState rank_state(StageModel& model, const Place& place);

// Mean loss per token over `windows` evenly spread windows of `data` (BatchSampler::eval_window),
// in micro-batches of `micro_batch` windows shared out round-robin across the data-parallel
// ranks; the last micro-batch's slots past `windows` are padding that adds no loss, so the
// result does not depend on micro_batch beyond rounding. Every rank of the job calls it and gets the
// job's result, or nullopt when the model's stop check ended the evaluation early
// (StageModel::set_stop_check). `on_batch` runs after each micro-batch is sampled.
std::optional<double> mean_window_loss(StageModel& model, const Place& place,
                                       const data::BatchSampler& data, std::int64_t windows,
                                       std::int64_t micro_batch,
                                       const std::function<void()>& on_batch = nullptr);

}  // namespace kintsugi
