#pragma once
// The shape of a model: what every layer, the planner and checkpoints agree on.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

// Architecture families (model.family):
//   gpt2   learned position embeddings, LayerNorm, GELU MLP, biases, tied embedding and head
//   llama  rotary position embeddings (RoPE), RMSNorm, SwiGLU MLP (gate and up projections,
//          then down), no biases, untied embedding and head, grouped-query attention
//   bloom  ALiBi attention biases (no position embeddings), LayerNorm after the embedding too,
//          GELU MLP, biases, tied embedding and head
enum class Family : std::uint8_t { gpt2, llama, bloom };
template <>
struct EnumNames<Family> {
  static constexpr std::array values = {std::pair{Family::gpt2, "gpt2"},
                                        std::pair{Family::llama, "llama"},
                                        std::pair{Family::bloom, "bloom"}};
};

struct ModelConfig {
  std::string name = "custom";  // preset it came from, for logs and checkpoints
  Family family = Family::gpt2;
  std::int64_t n_layer = 0;
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;          // key/value heads (grouped-query attention); 0: n_head
  std::int64_t d_ff = 0;               // MLP width; 4 * d_model for GPT-2
  std::int64_t vocab_size = 50257;     // real vocabulary (GPT-2 BPE)
  std::int64_t seq_len = 1024;         // context length (learned position embeddings)
  std::int64_t vocab_pad_multiple = 128;  // embedding rows are padded to a multiple of this
  double norm_eps = 1e-5;
  double init_std = 0.02;
  double rope_theta = 10000.0;         // llama: base of the rotary frequencies

  std::int64_t head_dim() const { return d_model / n_head; }
  std::int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Rows of the embedding / LM head: the vocabulary padded for GEMM efficiency and so that
  // tensor-parallel ranks get equal shards (Megatron pads to a multiple of 128 * tp).
  std::int64_t padded_vocab(std::int64_t tp = 1) const;

  // What the family implies.
  bool is_llama() const { return family == Family::llama; }
  bool is_bloom() const { return family == Family::bloom; }
  bool gated_mlp() const { return is_llama(); }          // SwiGLU: three d x d_ff matrices
  bool has_biases() const { return !is_llama(); }
  bool tied_embeddings() const { return !is_llama(); }
  bool rms_norm() const { return is_llama(); }            // else LayerNorm (weight and bias)
  bool learned_positions() const { return family == Family::gpt2; }
  bool embedding_norm() const { return is_bloom(); }
  bool uses_rope() const { return is_llama(); }           // queries and keys rotated
  bool uses_alibi() const { return is_bloom(); }          // attention biased by distance
};

// Where a model's values came from, for validate's messages: by default a run config's
// model.* keys; a file that gave them (a Hugging Face config.json, hf_config.hpp) names itself
// and its own fields, so that a refusal names what the user can change.
struct ModelFieldNames {
  std::string file;  // "" (a run config), else "<file>: " starts every message
  // "model.n_head" -> the name of the field that gave it ("num_attention_heads"); empty: the key.
  std::function<std::string(const std::string& key)> field;
};

// Throws kintsugi::Error naming the field to change.
void validate(const ModelConfig& config, const ModelFieldNames& names = {});

// Presets: GPT-2 124M/350M/774M/1.5B ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"),
// the GPT sizes of the Frontier study ("gpt-1.4b", "gpt-22b", "gpt-175b", "gpt-1t"), the
// published Llama and BLOOM runs ("llama-7b", "llama-13b", "llama-65b", "bloom-13b") and tiny
// versions of each family for tests ("gpt-tiny", "llama-tiny", "bloom-tiny").
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace kintsugi
