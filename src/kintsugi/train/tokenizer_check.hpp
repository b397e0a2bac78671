#pragma once
// The tokenizer checks of `train` and `eval` (tokenizer_identity.hpp): the data files, the
// config's data.tokenizer and the weights a run starts from must name the same tokenizer.
#include <string>
#include <vector>

#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// The identity of the tokenizer that made the data: every file's header (all must agree) and
// data.tokenizer when it loads (it must agree too; it is the one saved with the model).
// kintsugi::Error naming both sides of the first mismatch unless `allow`; `notes` gets the
// warnings: a file that records no tokenizer (written before token files did; once per
// command), and mismatches let through by `allow`.
data::TokenizerIdentity data_tokenizer(const std::vector<const data::BatchSampler*>& data,
                                       const DataConfig& config, bool allow,
                                       std::vector<std::string>& notes);

}  // namespace kintsugi
