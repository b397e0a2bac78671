#pragma once
// A run's training and validation data, opened from its config and checked before any work:
// every file validated, every id below model.vocab_size, a blend's weights positive.
#include <optional>
#include <string>

#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// data.train: one dataset, or the blend's datasets with their weights.
data::BatchSampler open_train_data(const RunConfig& config);
// The blend's val files, else data.val; nullopt when there is none (evaluation is skipped).
std::optional<data::BatchSampler> open_val_data(const RunConfig& config);

// One line per sampler for the log: "path (N tokens, weight w)".
std::string describe_data(const data::BatchSampler& sampler);

}  // namespace kintsugi
