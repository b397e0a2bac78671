#pragma once
// `--init-from`, as `train` and `eval` take it (docs/checkpoints.md): initial weights from
//   - a kintsugi run's <out>/model or training checkpoint <out>/checkpoints/step-N (weights
//     only: kintsugi_weights.hpp; the tokenizer it records must be the data's),
//   - a Hugging Face model folder (config.json gives the model's shape and the folder its
//     tokenizer: hf_init.hpp; the weights are read lazily, each rank its own elements:
//     hf_weights.hpp),
//   - or one Hugging Face .safetensors file (the model's shape from the run's config).
// Both commands open them through these two steps, so that what one accepts the other does.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/hf_config.hpp"
#include "kintsugi/checkpoint/hf_weights.hpp"
#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// Step 1, before the layout is resolved: where the path is a Hugging Face model folder (a
// directory that is not a kintsugi checkpoint), config.model and data.tokenizer come from it
// (adopt_hf_folder; `given`: the keys the user set). nullopt for anything else.
std::optional<HfModel> adopt_init_model(RunConfig& config, const std::filesystem::path& path,
                                        const std::set<std::string>& given,
                                        std::vector<std::string>& notes);

// Initial weights, opened and checked on every rank before any model exists.
class InitialWeights {
 public:
  // Step 2, once the data is open: a kintsugi checkpoint is read whole (checked against
  // `model`, its recorded tokenizer against `data_tokenizer`, the identity of the data called
  // `data_what`: a mismatch is refused unless `allow_mismatch`, then a warning in `notes`);
  // anything else is opened as Hugging Face weights (headers and shapes checked, no weight
  // read). `hf`: step 1's result. kintsugi::Error naming the file and the problem.
  InitialWeights(const std::filesystem::path& path, const ModelConfig& model,
                 const std::optional<HfModel>& hf, const std::string& data_what,
                 const data::TokenizerIdentity& data_tokenizer, bool allow_mismatch,
                 std::vector<std::string>& notes);

  // Sets this rank's weights (any layout); the optimizer state stays zero. Shapes are checked
  // before any weight is written.
  void set(const RankState& rank) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const HfWeights> hf_;                               // Hugging Face weights
  std::shared_ptr<const std::map<std::string, NamedTensor>> tensors_;  // a kintsugi run's
};

}  // namespace kintsugi
