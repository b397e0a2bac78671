#pragma once
// A run's training and validation data, opened from its config and checked before any work:
// every file validated, every id below model.vocab_size, a blend's weights positive.
#include <optional>
#include <string>
#include <string_view>

#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// data.train: one dataset, or the blend's datasets with their weights.
data::BatchSampler open_train_data(const RunConfig& config);
// The blend's val files, else data.val; nullopt when there is none (evaluation is skipped).
std::optional<data::BatchSampler> open_val_data(const RunConfig& config);

// One dataset (a token file or a Megatron dataset) for `config`'s model, e.g. `eval --data`;
// `key` names the setting to change when it does not fit the model.
data::BatchSampler open_one_dataset(const std::string& path, const char* key,
                                    const RunConfig& config);

// data.document_attention's end-of-document id: data.eod_id, or the end id of data.tokenizer
// (kintsugi::Error when that cannot be loaded); -1 without document attention.
std::int32_t document_end_id(const DataConfig& data);

// A data key `kintsugi plan --write-config` cannot know (data.train, data.val, data.tokenizer of
// a run planned from a preset), written as "<set me: `what`>". `kintsugi train` refuses a config
// that still holds one, naming the key, before anything else (refuse_data_placeholders).
std::string data_placeholder(std::string_view what);
void refuse_data_placeholders(const DataConfig& data);

// One line per sampler for the log: "path (N tokens, weight w)".
std::string describe_data(const data::BatchSampler& sampler);

}  // namespace kintsugi
