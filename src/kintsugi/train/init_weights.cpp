#include "kintsugi/train/init_weights.hpp"

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/kintsugi_weights.hpp"
#include "kintsugi/train/hf_init.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

std::optional<HfModel> adopt_init_model(RunConfig& config, const fs::path& path,
                                        const std::set<std::string>& given,
                                        std::vector<std::string>& notes) {
  if (std::error_code ec; !fs::is_directory(path, ec) || is_kintsugi_checkpoint(path))
    return std::nullopt;
  return adopt_hf_folder(config, path, given, notes);
}

InitialWeights::InitialWeights(const fs::path& path, const ModelConfig& model,
                               const std::optional<HfModel>& hf, const std::string& data_what,
                               const data::TokenizerIdentity& data_tokenizer, bool allow_mismatch,
                               std::vector<std::string>& notes)
    : source_(path.string()) {
  if (is_kintsugi_checkpoint(path)) {
    KintsugiWeights w = read_kintsugi_weights(path, model);
    std::string warning;
    data::check_same_tokenizer(path.string(), w.tokenizer, data_what, data_tokenizer,
                               allow_mismatch, &warning);
    if (!warning.empty()) notes.push_back(warning);
    tensors_ = std::make_shared<const std::map<std::string, NamedTensor>>(std::move(w.tensors));
  } else {
    hf_ = std::make_shared<const HfWeights>(path, model, hf && hf->head_from_embedding);
  }
}

void InitialWeights::set(const RankState& rank) const {
  if (hf_)
    hf_->set(rank);
  else
    set_weights(*tensors_, rank, source_);
}

}  // namespace kintsugi
