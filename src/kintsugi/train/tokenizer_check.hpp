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
// data.tokenizer, which must load (it is the one saved with the model) and agree: a file that
// records no tokenizer (a Megatron dataset) must hold no id beyond its vocabulary, and it must
// have no more ids than the model's `model_vocab_size` embedding rows (fewer is legal: Qwen2.5's
// 151665 ids on 152064 rows), checked first: the model would learn or emit ids it has no row
// for, or be saved with a tokenizer that produces them. `given_as`
// names where data.tokenizer came from for messages ("data.tokenizer", or "--init-from" when a
// Hugging Face folder gave it). kintsugi::Error naming both sides of the first mismatch unless
// `allow`; `notes` gets the warnings: what could not be checked (a token file without a
// fingerprint, written before token files kept one; a file without a tokenizer), and
// mismatches let through by `allow`.
data::TokenizerIdentity data_tokenizer(const std::vector<const data::BatchSampler*>& data,
                                       const DataConfig& config, std::int64_t model_vocab_size,
                                       const std::string& given_as, bool allow,
                                       std::vector<std::string>& notes);

}  // namespace kintsugi
