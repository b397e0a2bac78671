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
//   mistral  Llama's block (Hugging Face's MistralForCausalLM), which may attend in a sliding
//            window (model.sliding_window)
//   qwen2  Llama's block with biases on the query, key and value projections (Qwen2, Qwen2.5)
//   qwen3  Llama's block with an RMSNorm on each query head and each key head before RoPE
//          (Qwen3's q_norm and k_norm: a weight of head_dim for the queries, one for the keys)
enum class Family : std::uint8_t { gpt2, llama, bloom, mistral, qwen2, qwen3 };
template <>
struct EnumNames<Family> {
  static constexpr std::array values = {
      std::pair{Family::gpt2, "gpt2"}, std::pair{Family::llama, "llama"},
      std::pair{Family::bloom, "bloom"}, std::pair{Family::mistral, "mistral"},
      std::pair{Family::qwen2, "qwen2"}, std::pair{Family::qwen3, "qwen3"}};
};

// How RoPE's frequencies are stretched for contexts longer than the model was trained on
// (config.json's rope_scaling; docs/config.md "RoPE scaling"):
//   none    theta^(-2i/head_dim)
//   linear  every frequency divided by rope_factor (position interpolation)
//   llama3  Llama 3.1's: low frequencies divided by rope_factor, high ones kept, a smooth ramp
//           between the wavelengths rope_original_context / rope_low_freq_factor and
//           rope_original_context / rope_high_freq_factor
//   yarn    YaRN (Peng et al. 2023): interpolated and original frequencies blended by a ramp
//           over the dimensions that turn between rope_beta_slow and rope_beta_fast times in
//           rope_original_context, and queries and keys scaled by rope_attention_factor
enum class RopeScaling : std::uint8_t { none, linear, llama3, yarn };
template <>
struct EnumNames<RopeScaling> {
  static constexpr std::array values = {
      std::pair{RopeScaling::none, "none"}, std::pair{RopeScaling::linear, "linear"},
      std::pair{RopeScaling::llama3, "llama3"}, std::pair{RopeScaling::yarn, "yarn"}};
};

// Whether the LM head is the token embedding: as the family ships (GPT-2 and BLOOM tied,
// Llama untied), or chosen (Llama 3.2 1B/3B and the small Qwen models tie theirs).
enum class TiedHead : std::uint8_t { family, tied, untied };
template <>
struct EnumNames<TiedHead> {
  static constexpr std::array values = {std::pair{TiedHead::family, "family"},
                                        std::pair{TiedHead::tied, "tied"},
                                        std::pair{TiedHead::untied, "untied"}};
};

// The router's score (model.moe_router_score, docs/moe.md "DeepSeek-style routing"): a softmax
// over the experts (Mixtral, Qwen) or each expert's sigmoid (DeepSeek-V3).
enum class RouterScore : std::uint8_t { softmax, sigmoid };
template <>
struct EnumNames<RouterScore> {
  static constexpr std::array values = {std::pair{RouterScore::softmax, "softmax"},
                                        std::pair{RouterScore::sigmoid, "sigmoid"}};
};

// Mixture of experts (model.moe_*, docs/moe.md): with experts > 0 every block's MLP half is
// `experts` SwiGLU experts (Mixtral's w1 gate, w3 up, w2 down) of width expert_hidden behind a
// linear router (d_model -> experts, no bias): softmax over the experts, the top_k per token
// (ties to the lowest index), their probabilities as gates (divided by their sum with
// renormalize, as Mixtral; as they are without, as Qwen2-MoE's norm_topk_prob = false), and
// optionally a shared expert that every token goes through, scaled by a sigmoid gate of its own
// (Qwen2-MoE's shared_expert and shared_expert_gate). Dropless: every token reaches its top_k
// experts. Needs Llama's block (SwiGLU).
struct MoeConfig {
  std::int64_t experts = 0;         // 0: a dense MLP
  std::int64_t top_k = 2;
  std::int64_t expert_hidden = 0;   // each expert's SwiGLU width; 0: model.d_ff
  std::int64_t shared_experts = 0;  // 0: none; n: one shared SwiGLU of n x expert_hidden
  std::int64_t shared_hidden = 0;   // the shared expert's width when set (Qwen2-MoE's own)
  bool renormalize = true;          // model.moe_router_norm_topk
  // model.moe_capacity_factor: 0 dropless; else each expert takes at most
  // ceil(factor x rows x top_k / experts) of a micro-batch's routed rows (a rank's own rows
  // under expert parallelism), the lower token rows first, and the choices past it are dropped
  // (their gates zero: docs/moe.md, "Capacity factor").
  double capacity_factor = 0;
  // DeepSeek-style routing (docs/moe.md, "DeepSeek-style routing"): the score; the gates times
  // routed_scaling; group-limited selection (the experts in `groups` equal groups, top_k chosen
  // among the topk_groups best groups; 1: off); the auxiliary-loss-free balancing bias's step
  // (0: off).
  RouterScore score = RouterScore::softmax;  // model.moe_router_score
  double routed_scaling = 1.0;               // model.moe_routed_scaling_factor
  std::int64_t groups = 1;                   // model.moe_router_groups
  std::int64_t topk_groups = 1;              // model.moe_router_topk_groups
  double bias_update_rate = 0;               // model.moe_router_bias_update_rate
  // The capacity of each expert for a micro-batch of `rows` token rows (0: dropless).
  std::int64_t capacity(std::int64_t rows) const;

  // Which blocks are MoE blocks (docs/moe.md, "Dense blocks"); the others have the dense SwiGLU
  // MLP of width model.d_ff. Block i is a MoE block when i >= first_dense,
  // (i - first_dense + 1) % layer_freq == 0 and i is not in dense_layers: with first_dense 0 the
  // rule is Qwen2-MoE's ((i + 1) % decoder_sparse_step == 0, mlp_only_layers); first_dense k is
  // DeepSeek's first_k_dense_replace. The defaults make every block a MoE block.
  std::int64_t first_dense = 0;              // model.moe_first_dense_layers
  std::int64_t layer_freq = 1;               // model.moe_layer_freq
  std::vector<std::int64_t> dense_layers;    // model.moe_dense_layers (mlp_only_layers)
  // With experts > 0: whether block `index` is a MoE block.
  bool moe_block(std::int64_t index) const;
  // Whether some block is dense (experts > 0 and the pattern above leaves a block dense).
  bool has_dense_blocks(std::int64_t n_layer) const;
};

// `kintsugi eval` and `generate` of a model trained with auxiliary-loss-free balancing
// (MoeConfig::bias_update_rate > 0): refused in one line naming `command`, since the saved model
// does not hold the bias yet (training checkpoints do; docs/moe.md, "DeepSeek-style routing").
struct ModelConfig;
void refuse_router_bias_inference(const ModelConfig& c, const char* command);

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
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1.0;             // linear, llama3, yarn: how much longer the context is
  double rope_low_freq_factor = 1.0;    // llama3
  double rope_high_freq_factor = 4.0;   // llama3
  std::int64_t rope_original_context = 0;  // llama3, yarn: the trained context; 0: seq_len
  double rope_beta_fast = 32.0;         // yarn: rotations where extrapolation starts
  double rope_beta_slow = 1.0;          // yarn: rotations where interpolation is complete
  double rope_attention_factor = 0.0;   // yarn: 0 means 0.1 ln(rope_factor) + 1
  std::int64_t head_size = 0;           // model.head_dim: 0 means d_model / n_head
  // Sliding-window attention (Mistral): each query sees itself and the sliding_window - 1 keys
  // before it; 0: the whole causal context.
  std::int64_t sliding_window = 0;
  TiedHead tie_embeddings = TiedHead::family;
  MoeConfig moe;

  bool is_moe() const { return moe.experts > 0; }
  // Whether block `index` has a mixture of experts (is_moe() and MoeConfig::moe_block).
  bool is_moe_block(std::int64_t index) const { return is_moe() && moe.moe_block(index); }
  // The MoE blocks among blocks [first, first + count) (all blocks by default).
  std::int64_t moe_blocks(std::int64_t first = 0, std::int64_t count = -1) const;
  std::int64_t expert_hidden() const { return moe.expert_hidden > 0 ? moe.expert_hidden : d_ff; }
  // The shared expert's SwiGLU width (0: none).
  std::int64_t shared_hidden() const {
    if (moe.shared_experts == 0) return 0;
    return moe.shared_hidden > 0 ? moe.shared_hidden : moe.shared_experts * expert_hidden();
  }
  std::int64_t head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  // Width of the queries (and of the attention output before its projection): d_model unless
  // the head size is set apart from it (Qwen3, Mistral-Nemo).
  std::int64_t q_width() const { return n_head * head_dim(); }
  std::int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Rows of the embedding / LM head: the vocabulary padded for GEMM efficiency and so that
  // tensor-parallel ranks get equal shards (Megatron pads to a multiple of 128 * tp).
  std::int64_t padded_vocab(std::int64_t tp = 1) const;

  // What the family implies.
  // Llama's block: RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases but Qwen2's qkv.
  bool is_llama() const {
    return family == Family::llama || family == Family::mistral || family == Family::qwen2 ||
           family == Family::qwen3;
  }
  bool is_bloom() const { return family == Family::bloom; }
  bool gated_mlp() const { return is_llama(); }          // SwiGLU: three d x d_ff matrices
  bool has_biases() const { return !is_llama(); }          // every linear layer's
  bool qkv_bias() const { return has_biases() || family == Family::qwen2; }
  // Qwen3: each query and key head RMS-normalized (eps norm_eps) after the qkv projection,
  // before RoPE (Backend::qk_norm_forward).
  bool qk_norm() const { return family == Family::qwen3; }
  bool tied_embeddings() const {
    return tie_embeddings == TiedHead::family ? !is_llama() : tie_embeddings == TiedHead::tied;
  }
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
// published Llama and BLOOM runs ("llama-7b", "llama-13b", "llama-65b", "bloom-13b"), the
// models people download today ("llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b",
// "qwen2.5-7b", "qwen3-8b")
// and tiny versions of each family and piece for tests ("gpt-tiny", "llama-tiny",
// "llama3-tiny", "qwen2-tiny", "qwen3-tiny", "bloom-tiny").
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace kintsugi
