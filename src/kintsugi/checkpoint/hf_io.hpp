#pragma once
// Export to and import from Hugging Face's safetensors + config.json (hf_layout.hpp has the
// per-family name and layout tables).
#include <filesystem>
#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

// Writes the weights of a checkpoint (a training checkpoint step-N, or the model/ directory
// a run saves) to `out` (.safetensors) with Hugging Face names and layout, and config.json
// next to it. Returns the model's configuration. With `max_shard_bytes` > 0 and more weights
// than that, the sharded layout instead (write_hf_weights).
ModelConfig export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                      std::uint64_t max_shard_bytes = 0);

// Writes `tensors` as `out` (one file), or, when `max_shard_bytes` > 0 and they hold more bytes
// than that, as transformers' save_pretrained shards them: <stem>-0000K-of-0000N.safetensors of
// at most that many bytes each (a larger tensor alone), tensors kept in `order`, and
// <out>.index.json naming each tensor's shard, written last. Files of an earlier export to the
// same place that a loader would read instead (the single file, an index and its shards) are
// removed.
void write_hf_weights(const std::filesystem::path& out,
                      const std::map<std::string, NamedTensor>& tensors,
                      const std::vector<std::string>& order, std::uint64_t max_shard_bytes);

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
