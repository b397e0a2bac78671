#pragma once
// Export to and import from Hugging Face's safetensors + config.json (hf_layout.hpp has the
// per-family name and layout tables).
#include <filesystem>
#include <map>
#include <string>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

// Writes the weights of a checkpoint (a training checkpoint step-N, or the model/ directory
// a run saves) to `out` (.safetensors) with Hugging Face names and layout, and config.json
// next to it. Returns the model's configuration.
ModelConfig export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out);

// Reads a safetensors file with Hugging Face names into our tensors (name -> whole tensor in
// our layout, without vocabulary padding), checked against `config`: every tensor present
// that the conversion needs (a longer position table is cut to model.seq_len); set_weights
// checks every shape against the model's parameters. kintsugi::Error otherwise.
std::map<std::string, NamedTensor> read_hf_weights(const std::filesystem::path& path,
                                                   const ModelConfig& config);

// Sets this rank's weights (any layout) from whole tensors, after checking every shape; the
// optimizer state stays zero. `source` names the tensors' file in messages.
void set_weights(const std::map<std::string, NamedTensor>& tensors, const RankState& rank,
                 const std::string& source);

}  // namespace kintsugi
