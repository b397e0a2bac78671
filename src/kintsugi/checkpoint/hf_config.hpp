#pragma once
// A Hugging Face config.json read back into our model configuration: the inverse of
// hf_layout.hpp's hf_config for the families kintsugi has (GPT2LMHeadModel, LlamaForCausalLM,
// BloomForCausalLM). A field whose value would change the model's arithmetic in a way ours
// cannot follow (rope_scaling, another activation, attention biases in Llama, ...) and any
// field this reader does not know are refused, naming the field: a model that loads must be
// the model the folder describes.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct HfModel {
  ModelConfig model;  // seq_len: the model's position limit (max_positions, or 1024 without one)
  std::int64_t max_positions = 0;  // n_positions / max_position_embeddings (0: none, BLOOM)
  // Llama with tie_word_embeddings: the file has no lm_head; ours starts as the embedding's copy.
  bool head_from_embedding = false;
  std::vector<std::string> notes;  // what the run should say (dropout not applied, ...)
  // Our model key -> their field, for messages ("model.d_ff" -> "intermediate_size"); a key
  // they have no field for is itself, a family without field names a kintsugi::Error.
  std::string field_of(const std::string& key) const;
};

// kintsugi::Error naming `source` (the config.json) and the field otherwise.
HfModel model_from_hf_config(const nlohmann::json& config, const std::string& source);

}  // namespace kintsugi
