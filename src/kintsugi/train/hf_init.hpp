#pragma once
// `kintsugi train --init-from FOLDER`: a Hugging Face model folder gives the model's shape
// (config.json, hf_config.hpp) and its tokenizer, so that a user need not copy them into the
// run's config (docs/checkpoints.md).
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/hf_config.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// Sets config.model from FOLDER/config.json, and data.tokenizer to the folder when it holds
// tokenizer.json (or vocab.json and merges.txt). `given` (run_config.hpp given_keys): a model key
// the user gave that contradicts config.json is refused, naming both fields; model.preset,
// model.seq_len (the training context, at most a learned position table's rows),
// model.vocab_pad_multiple and model.init_std stay the user's. A folder with only
// tokenizer.model (SentencePiece) is refused unless data.tokenizer is given: kintsugi reads
// tokenizer.json. The notes are for the run's log. kintsugi::Error otherwise.
HfModel adopt_hf_folder(RunConfig& config, const std::filesystem::path& folder,
                        const std::set<std::string>& given, std::vector<std::string>& notes);

}  // namespace kintsugi
