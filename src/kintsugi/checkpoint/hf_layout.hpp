#pragma once
// Our tensors as Hugging Face transformers names and lays them out, per model family, so that
// `kintsugi export` writes a model the Python ecosystem opens and `--init-from` reads one it
// wrote (for example a downloaded pretrained GPT-2).
//
// A family is a table: each of our tensors, its Hugging Face name and the conversion between
// the two layouts. GPT-2 uses Conv1D modules whose weights are [in, out] (ours are [out, in],
// like nn.Linear) and packs the attention input projection as q | k | v over all heads (ours
// packs per head: q, k, v of head 0, then head 1, ...). Llama (LlamaForCausalLM) keeps nn.Linear
// layouts but splits our fused qkv into q_proj, k_proj and v_proj: three Hugging Face tensors
// are row blocks of one of ours. Our RoPE pairs dimension i with i + head_dim / 2 (Hugging
// Face's rotate_half), so no permutation of q and k is needed. BLOOM (BloomForCausalLM) packs
// query_key_value per head exactly as we do. A mixture of experts (docs/moe.md) goes out as
// Mixtral (families llama and mistral: block_sparse_moe.gate, experts.N.w1/w2/w3), Qwen2-MoE
// (family qwen2: mlp.gate, mlp.experts.N.gate_proj/up_proj/down_proj, mlp.shared_expert and
// mlp.shared_expert_gate) or Qwen3-MoE (family qwen3: Qwen2-MoE's names without a shared
// expert), each expert's matrices one tensor each, as those models ship.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

enum class HfConversion {
  none,
  transpose,          // [out, in] <-> Conv1D [in, out]
  fused_qkv,          // rows regrouped from per-head (q, k, v) to q | k | v
  fused_qkv_weight,   // fused_qkv, then transposed
  qkv_q,              // rows of fused_qkv: the query heads (Llama's q_proj)
  qkv_k,              //   the key heads (k_proj)
  qkv_v,              //   the value heads (v_proj)
};

// Whether `c` makes one Hugging Face tensor out of a row block of one of ours; the rows, in
// the q | k | v order, that it takes.
bool is_qkv_part(HfConversion c);
struct RowRange {
  std::int64_t begin = 0, end = 0;
};
RowRange qkv_part_rows(HfConversion c, const ModelConfig& config);

struct HfTensor {
  std::string ours, theirs;
  HfConversion conversion = HfConversion::none;
};

// Every tensor of the model, in order; kintsugi::Error for a family without a table.
std::vector<HfTensor> hf_tensors(const ModelConfig& config);
// The config.json that goes next to the exported weights (without the tokenizer's
// bos_token_id and eos_token_id, which export_hf adds from the tokenizer it writes);
// kintsugi::Error for a family it has no config for.
nlohmann::json hf_config(const ModelConfig& config);
// Hugging Face names may carry the model class's prefix ("transformer.h.0..." from
// GPT2LMHeadModel, "h.0..." from GPT2Model): the name without it.
std::string hf_base_name(const std::string& name);
// The blocks a model's tensor names hold: one more than the largest block number in a name
// ("h.11." in GPT-2 and BLOOM, "layers.11." in Llama, after the model prefix); 0 for none.
std::int64_t hf_block_count(const std::vector<std::string>& names);

// Element by element, for reading only a rank's slice (hf_weights.hpp): where element `g`
// (row-major) of our tensor of stored shape [rows, cols] (cols 1 for a vector) lies in theirs
// under conversion `c`. `part` is 0 except for a qkv part's source: 0, 1, 2 for the q, k, v
// tensors of Llama's q_proj, k_proj and v_proj (then `c` is any of the three qkv parts).
struct HfElement {
  int part = 0;
  std::int64_t index = 0;
};
HfElement hf_element(HfConversion c, const ModelConfig& config, std::int64_t rows,
                     std::int64_t cols, std::int64_t g);
// The shape of their tensor converted from ours of stored shape `ours` (for a qkv part, the
// part's own rows).
std::vector<std::int64_t> hf_shape(HfConversion c, const ModelConfig& config,
                                   const std::vector<std::int64_t>& ours);
// The stored shape of our tensor `name` (without vocabulary padding) for `config`.
std::vector<std::int64_t> our_shape(const std::string& name, const ModelConfig& config);

// Converts a whole tensor (our stored shape, without vocabulary padding) to theirs and back.
// from_hf of a qkv part is the whole fused tensor (q | k | v order) converted back; the import
// assembles it from the three parts first.
NamedTensor to_hf(const HfTensor& t, const ModelConfig& config, const NamedTensor& ours);
NamedTensor from_hf(const HfTensor& t, const ModelConfig& config, const NamedTensor& theirs);

}  // namespace kintsugi
