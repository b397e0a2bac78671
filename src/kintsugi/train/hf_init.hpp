#pragma once
// `kintsugi train --init-from FOLDER`: a Hugging Face model folder gives the model's shape
// (config.json, hf_config.hpp) and its tokenizer, so that a user need not copy them into the
// run's config (docs/checkpoints.md).
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/hf_config.hpp"
#include "kintsugi/checkpoint/hf_weights.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// Sets config.model from FOLDER/config.json, and data.tokenizer to the folder when it holds
// tokenizer.json (or vocab.json and merges.txt). `given` (run_config.hpp given_keys): a model key
// the user gave that contradicts config.json is refused, naming both fields; model.preset,
// model.seq_len (the training context, at most a learned position table's rows),
// model.vocab_pad_multiple and model.init_std stay the user's. A folder with only
// tokenizer.model (SentencePiece) is refused unless data.tokenizer is given: kintsugi reads
// tokenizer.json. The notes are for the run's log; the one on model.seq_len ends with how to
// change it, `seq_len_flag` (empty: a command that runs the folder's whole context says none).
// kintsugi::Error otherwise.
HfModel adopt_hf_folder(RunConfig& config, const std::filesystem::path& folder,
                        const std::set<std::string>& given, std::vector<std::string>& notes,
                        const std::string& seq_len_flag = "--set model.seq_len=N");

// A Hugging Face model folder opened for one process, as `generate --init-from` and `import`
// take it (docs/checkpoints.md): adopt_hf_folder's model (the folder's whole context) and
// tokenizer (`tokenizer`, a path the user names, instead of the folder's), then the weights'
// index and headers checked against it (HfWeights; no weight read). `flag` names the folder in
// messages. kintsugi::Error for anything but such a folder.
struct HfFolder {
  RunConfig config;
  HfModel hf;
  std::shared_ptr<const HfWeights> weights;
  std::vector<std::string> notes;
};
HfFolder open_hf_folder(const std::filesystem::path& folder, const std::string& flag,
                        const std::string& tokenizer);

}  // namespace kintsugi
