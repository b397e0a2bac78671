#pragma once
// Weights-only initialisation from a kintsugi run (`train --init-from`, docs/checkpoints.md
// "Fine-tuning from a kintsugi run"): the whole tensors of a saved model (<out>/model) or of a
// training checkpoint (<out>/checkpoints/step-N), without its optimizer state, step or
// loss-scaler state, for hf_io.hpp's set_weights to place in any layout. Like Megatron-LM's
// --finetune: the run starts at step 0 with a new optimizer and learning-rate schedule.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

// Whether `path` is a directory whose manifest.json names kintsugi's model or training
// checkpoint format (anything else is left to the Hugging Face reader).
bool is_kintsugi_checkpoint(const std::filesystem::path& path);

struct KintsugiWeights {
  std::map<std::string, NamedTensor> tensors;  // whole, without vocabulary padding
  data::TokenizerIdentity tokenizer;           // as the manifest records it (may be unknown)
  std::int64_t step = 0;                       // the step they were saved at (for the log)
};

// Every tensor, after the directory's checks (manifest, sizes, checksums) and
// check_loadable_model against `config` (model_match.hpp: a learned position table is cut to
// config.seq_len rows; a longer seq_len is refused with the reason). kintsugi::Error otherwise.
KintsugiWeights read_kintsugi_weights(const std::filesystem::path& dir, const ModelConfig& config);

}  // namespace kintsugi
