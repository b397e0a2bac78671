#pragma once
// The families and pieces the whole-model tests run (test_model_families.cpp,
// test_kv_cache.cpp): a family's name, or one of these variants of Llama's block:
//   llama_window  a sliding window of 3 rows (model.sliding_window)
//   llama_scaled  Llama 3.1's RoPE scaling over an original context of 3 positions, heads of 6
//                 apart from d_model / n_head (model.head_dim), and a tied head
//   mistral       Mistral's family with a window of 3
//   qwen2         Qwen2's qkv biases, with YaRN over an original context of 4 positions
//   qwen3         Qwen3's q_norm and k_norm, with heads of 6 apart from d_model / n_head
//   llama_moe     a mixture of experts (docs/moe.md): 4 experts of 6, top 2, renormalized
//   qwen2_moe     Qwen2-MoE's: top 1 of 4 experts, not renormalized, a shared expert of 10
//   llama_moe_capacity  llama_moe with a capacity factor of 0.5: each expert keeps a quarter
//                 of a micro-batch's rows, the rest of its choices dropped (docs/moe.md)
//   qwen2_moe_dense  qwen2_moe with its first block dense (model.moe_first_dense_layers = 1,
//                 docs/moe.md "Dense blocks"): with 2 blocks, dense then MoE
//                 (the MoE variants are not in kFamilyVariants; test_kv_cache.cpp runs the
//                 dropless two with a key/value cache)
// Each test then gives the model its own sizes.
#include <string>
#include <vector>

#include "kintsugi/model/config.hpp"

namespace kintsugi::testing {

inline const std::vector<std::string> kFamilyVariants = {
    "gpt2", "llama", "bloom", "llama_window", "llama_scaled", "mistral", "qwen2", "qwen3"};

inline ModelConfig family_variant(const std::string& param) {
  ModelConfig c;
  c.name = param;
  if (param == "llama_moe" || param == "qwen2_moe" || param == "llama_moe_capacity" ||
      param == "qwen2_moe_dense") {
    const bool llama = param != "qwen2_moe" && param != "qwen2_moe_dense";
    c.family = llama ? Family::llama : Family::qwen2;
    c.moe.experts = 4;
    c.moe.expert_hidden = 6;
    c.moe.top_k = llama ? 2 : 1;
    c.moe.renormalize = llama;
    c.moe.shared_experts = llama ? 0 : 1;
    c.moe.shared_hidden = llama ? 0 : 10;
    if (param == "llama_moe_capacity") c.moe.capacity_factor = 0.5;
    if (param == "qwen2_moe_dense") c.moe.first_dense = 1;
    return c;
  }
  if (param == "llama_window" || param == "llama_scaled") {
    c.family = Family::llama;
  } else {
    c.family = parse_name<Family>(param, "family");
  }
  if (param == "llama_window" || param == "mistral") c.sliding_window = 3;
  if (param == "llama_scaled") {
    c.rope_scaling = RopeScaling::llama3;
    c.rope_factor = 4;
    c.rope_original_context = 3;
    c.head_size = 6;
    c.tie_embeddings = TiedHead::tied;
  }
  if (param == "qwen2") {
    c.rope_scaling = RopeScaling::yarn;
    c.rope_factor = 2;
    c.rope_original_context = 4;
  }
  if (param == "qwen3") c.head_size = 6;
  return c;
}

}  // namespace kintsugi::testing
