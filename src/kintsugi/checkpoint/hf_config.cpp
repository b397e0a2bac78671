#include "kintsugi/checkpoint/hf_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

using nlohmann::json;

// Fields that describe the files, generation or the Python classes, not the arithmetic.
const std::set<std::string> kMetadata = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id",
    "sep_token_id", "decoder_start_token_id", "tokenizer_class", "initializer_range",
    "task_specific_params", "return_dict", "output_attentions", "output_hidden_states",
    "is_encoder_decoder", "gradient_checkpointing", "prefix", "id2label", "label2id"};

// Reads config.json's fields one by one; every field read is marked, and the rest are refused.
class Fields {
 public:
  Fields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const std::string& f) const { return j_.contains(f) && !j_.at(f).is_null(); }
  const json& at(const std::string& f) {
    used_.insert(f);
    return j_.at(f);
  }
  void mark(const std::string& f) { used_.insert(f); }

  std::int64_t integer(const std::string& f) {
    if (!has(f)) fail("{} has no {}: it is not a complete model configuration", source_, f);
    return integer_value(f);
  }
  std::int64_t integer(const std::string& f, std::int64_t fallback) {
    mark(f);
    return has(f) ? integer_value(f) : fallback;
  }
  double number(const std::string& f, double fallback) {
    mark(f);
    if (!has(f)) return fallback;
    if (!j_.at(f).is_number() || !std::isfinite(j_.at(f).get<double>()))
      fail("{}: {} = {} is not a finite number", source_, f, j_.at(f).dump());
    return j_.at(f).get<double>();
  }
  bool boolean(const std::string& f, bool fallback) {
    mark(f);
    if (!has(f)) return fallback;
    if (!j_.at(f).is_boolean()) fail("{}: {} = {} is not true or false", source_, f, j_.at(f).dump());
    return j_.at(f).get<bool>();
  }
  // A field that must have one value (when present) for our model to be theirs.
  void require(const std::string& f, const json& value, const std::string& why) {
    mark(f);
    if (has(f) && j_.at(f) != value)
      fail("{}: {} = {} is not supported ({})", source_, f, j_.at(f).dump(), why);
  }
  // A field that must be absent or null.
  void refuse(const std::string& f, const std::string& why) {
    mark(f);
    if (has(f)) fail("{}: {} = {} is not supported ({})", source_, f, j_.at(f).dump(), why);
  }
  // Dropout probabilities: we train without dropout; a non-zero one is said, not refused.
  void dropout(const std::string& f, std::vector<std::string>& notes) {
    const double p = number(f, 0.0);
    if (p != 0.0)
      notes.push_back(fmt::format("note: {} sets {} = {}; kintsugi trains without dropout",
                                  source_, f, p));
  }
  // Everything not read must be metadata.
  void refuse_unknown(const std::string& family) const {
    for (const auto& [f, _] : j_.items())
      if (!used_.count(f) && !kMetadata.count(f) && !f.starts_with("summary_"))
        fail("{}: field {} is not one kintsugi knows for a {} model (it may change the model's "
             "arithmetic): not supported",
             source_, f, family);
  }

 private:
  std::int64_t integer_value(const std::string& f) {
    used_.insert(f);
    const json& v = j_.at(f);
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
      fail("{}: {} = {} is not a positive integer", source_, f, v.dump());
    return v.get<std::int64_t>();
  }

  const json& j_;
  std::string source_;
  std::set<std::string> used_;
};

// What every family's reading starts with: the family, the one architecture its config may
// name (absent or null is fine), and the vocabulary size.
HfModel start_model(Fields& f, const json& j, Family family, const std::string& architecture,
                    const std::string& source) {
  if (j.contains("architectures") && !j.at("architectures").is_null()) {
    const json& a = j.at("architectures");
    if (!a.is_array() || a.size() != 1 || a[0] != architecture)
      fail("{}: architectures = {} is not supported (kintsugi loads {})", source, a.dump(),
           architecture);
  }
  f.mark("architectures");
  HfModel h;
  h.model.family = family;
  h.model.vocab_size = f.integer("vocab_size");
  return h;
}

// GPT-2 and BLOOM tie the LM head to the token embedding, as kintsugi's versions of them do.
void require_tied_head(Fields& f, const std::string& family, const std::string& source) {
  if (!f.boolean("tie_word_embeddings", true))
    fail("{}: tie_word_embeddings = false is not supported (kintsugi's {} ties the LM head to "
         "the token embedding)",
         source, family);
}

HfModel gpt2(Fields& f, const json& j, const std::string& source) {
  HfModel h = start_model(f, j, Family::gpt2, "GPT2LMHeadModel", source);
  ModelConfig& m = h.model;
  m.d_model = f.integer("n_embd");
  m.n_layer = f.integer("n_layer");
  m.n_head = f.integer("n_head");
  m.d_ff = f.has("n_inner") ? f.integer("n_inner") : 4 * m.d_model;
  f.mark("n_inner");
  h.max_positions = f.integer("n_positions");
  f.integer("n_ctx", h.max_positions);  // an old alias of n_positions
  m.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  m.init_std = f.number("initializer_range", 0.02);
  const std::string act = f.has("activation_function") ? f.at("activation_function").dump() : "";
  if (!act.empty() && act != "\"gelu_new\"" && act != "\"gelu_pytorch_tanh\"")
    fail("{}: activation_function = {} is not supported (kintsugi's GPT-2 uses GELU's tanh "
         "approximation: gelu_new)",
         source, act);
  require_tied_head(f, "GPT-2", source);
  f.require("scale_attn_weights", true, "attention scores are scaled by 1/sqrt(head size)");
  f.require("scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
  f.require("add_cross_attention", false, "a decoder-only model");
  f.boolean("reorder_and_upcast_attn", false);  // float32 attention scores: ours are already
  for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) f.dropout(p, h.notes);
  f.refuse_unknown("GPT-2");
  return h;
}

// config.json's rope_scaling (or transformers 5's rope_parameters, which holds rope_theta too):
// the scaling's type and its parameters, each read by name, anything else refused.
void read_rope_scaling(const json& r, const std::string& field, ModelConfig& m,
                       const std::string& source) {
  if (!r.is_object()) fail("{}: {} = {} is not an object", source, field, r.dump());
  const std::string type_key = r.contains("rope_type") ? "rope_type" : "type";
  const std::string type =
      r.contains(type_key) && r.at(type_key).is_string() ? r.at(type_key).get<std::string>() : "";
  if (type == "default" || (type.empty() && field == "rope_parameters")) {
    m.rope_scaling = RopeScaling::none;
  } else if (type == "linear" || type == "llama3" || type == "yarn") {
    m.rope_scaling = parse_name<RopeScaling>(type, "rope type");
  } else {
    fail("{}: {}.{} = {} is not supported (kintsugi scales RoPE with linear, llama3 or yarn)",
         source, field, type_key, r.contains(type_key) ? r.at(type_key).dump() : "(absent)");
  }
  auto number = [&](const std::string& k, const json& v) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      fail("{}: {}.{} = {} must be a positive number", source, field, k, v.dump());
    return v.get<double>();
  };
  // Which parameters each type reads (Hugging Face's modeling_rope_utils).
  const std::map<std::string, std::set<RopeScaling>> used = {
      {"factor", {RopeScaling::linear, RopeScaling::llama3, RopeScaling::yarn}},
      {"low_freq_factor", {RopeScaling::llama3}},
      {"high_freq_factor", {RopeScaling::llama3}},
      {"original_max_position_embeddings", {RopeScaling::llama3, RopeScaling::yarn}},
      {"beta_fast", {RopeScaling::yarn}},
      {"beta_slow", {RopeScaling::yarn}},
      {"attention_factor", {RopeScaling::yarn}},
      {"truncate", {RopeScaling::yarn}}};
  for (const auto& [k, v] : r.items()) {
    if (k == type_key || (k == "rope_type" || k == "type")) continue;
    if (k == "rope_theta" && field == "rope_parameters") {
      m.rope_theta = number(k, v);
      continue;
    }
    const auto it = used.find(k);
    if (it == used.end() || !it->second.count(m.rope_scaling))
      fail("{}: {}.{} = {} is not supported for rope type \"{}\"", source, field, k, v.dump(),
           name_of(m.rope_scaling));
    if (k == "truncate") {
      if (v != true)
        fail("{}: {}.truncate = {} is not supported (kintsugi's YaRN rounds its ramp's bounds "
             "outwards: truncate = true)",
             source, field, v.dump());
    } else if (k == "factor") {
      m.rope_factor = number(k, v);
    } else if (k == "low_freq_factor") {
      m.rope_low_freq_factor = number(k, v);
    } else if (k == "high_freq_factor") {
      m.rope_high_freq_factor = number(k, v);
    } else if (k == "original_max_position_embeddings") {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
        fail("{}: {}.{} = {} is not a positive integer", source, field, k, v.dump());
      m.rope_original_context = v.get<std::int64_t>();
    } else if (k == "beta_fast") {
      m.rope_beta_fast = number(k, v);
    } else if (k == "beta_slow") {
      m.rope_beta_slow = number(k, v);
    } else if (k == "attention_factor") {
      m.rope_attention_factor = number(k, v);
    }
  }
  if (m.rope_scaling == RopeScaling::llama3 && m.rope_original_context == 0)
    fail("{}: {} of rope type \"llama3\" has no original_max_position_embeddings", source, field);
}

// How a family's config.json names its experts (docs/moe.md "Hugging Face folders").
enum class MoeFields {
  none,
  mixtral,  // MixtralForCausalLM: num_local_experts, the experts' width as intermediate_size
  qwen,     // Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: num_experts, moe_intermediate_size
};

// The experts' fields of a Mixtral or Qwen-MoE config.json. Every Mixtral layer is a MoE layer;
// Qwen's may be dense (decoder_sparse_step, mlp_only_layers: docs/moe.md, "Dense blocks").
void read_moe(Fields& f, MoeFields style, Family family, HfModel& h, const std::string& source) {
  MoeConfig& e = h.model.moe;
  if (style == MoeFields::mixtral) {
    e.experts = f.integer("num_local_experts");
    e.top_k = f.integer("num_experts_per_tok", 2);
    e.renormalize = true;  // Mixtral divides its top-k routing weights by their sum
    // intermediate_size (model.d_ff, read by llama_like) is each expert's width.
    if (f.number("router_jitter_noise", 0.0) != 0.0)
      fail("{}: router_jitter_noise = {} is not supported (kintsugi's router adds no noise)",
           source, f.at("router_jitter_noise").dump());
  } else {
    e.experts = f.integer("num_experts");
    e.top_k = f.integer("num_experts_per_tok", family == Family::qwen3 ? 8 : 4);
    e.expert_hidden = f.integer("moe_intermediate_size");
    e.renormalize = f.boolean("norm_topk_prob", family == Family::qwen3);
    if (family == Family::qwen2) {  // Qwen2-MoE's shared expert behind its sigmoid gate
      e.shared_experts = 1;
      e.shared_hidden = f.integer("shared_expert_intermediate_size");
    }
    // Which blocks are MoE blocks: block i when (i + 1) % decoder_sparse_step == 0 and i is
    // not in mlp_only_layers, ours with model.moe_first_dense_layers 0 (MoeConfig::moe_block);
    // the others have the dense MLP of width intermediate_size (model.d_ff).
    e.layer_freq = f.integer("decoder_sparse_step", 1);
    f.mark("mlp_only_layers");
    if (f.has("mlp_only_layers")) {
      const json& only = f.at("mlp_only_layers");
      if (!only.is_array())
        fail("{}: mlp_only_layers = {} is not a list of layer numbers", source, only.dump());
      for (const json& i : only) {
        if (!i.is_number_integer() || i.get<std::int64_t>() < 0)
          fail("{}: mlp_only_layers = {} is not a list of layer numbers", source, only.dump());
        e.dense_layers.push_back(i.get<std::int64_t>());
      }
    }
    f.require("qkv_bias", family == Family::qwen2, "the family's attention biases");
  }
  f.boolean("output_router_logits", false);  // what transformers returns, not the model
  // A training setting (transformers adds it only with output_router_logits): ours is
  // train.moe_aux_loss_coeff.
  const double coeff = f.number("router_aux_loss_coef", 0.0);
  if (coeff != 0.0)
    h.notes.push_back(fmt::format(
        "note: {} sets router_aux_loss_coef = {} for training in transformers; a kintsugi run "
        "weighs its load-balancing loss by train.moe_aux_loss_coeff",
        source, coeff));
}

// Llama's block as each family's config.json writes it: Llama (1-3.3), Mistral, Qwen2/2.5,
// Qwen3, and the mixtures of experts built on them (Mixtral, Qwen2-MoE, Qwen3-MoE).
HfModel llama_like(Fields& f, const json& j, const std::string& source, Family family,
                   const std::string& architecture, const std::string& family_name,
                   MoeFields moe = MoeFields::none) {
  HfModel h = start_model(f, j, family, architecture, source);
  ModelConfig& m = h.model;
  m.d_model = f.integer("hidden_size");
  m.d_ff = f.integer("intermediate_size");
  m.n_layer = f.integer("num_hidden_layers");
  m.n_head = f.integer("num_attention_heads");
  m.n_kv_head = f.integer("num_key_value_heads", m.n_head);
  if (m.n_head % m.n_kv_head != 0)
    fail("{}: num_key_value_heads = {} does not divide num_attention_heads = {}", source,
         m.n_kv_head, m.n_head);
  // A head size of its own (Qwen3, Mistral-Nemo; Llama 3's configs write the usual one).
  // Qwen3Config's head_dim defaults to 128 whatever the width, the others' to hidden_size /
  // num_attention_heads (docs/checkpoints.md).
  if (f.has("head_dim") || family == Family::qwen3) {
    const std::int64_t hd = f.integer("head_dim", 128);
    if (hd * m.n_head != m.d_model) m.head_size = hd;
  } else if (m.d_model % m.n_head != 0) {
    fail("{}: num_attention_heads = {} does not divide hidden_size = {} and there is no head_dim",
         source, m.n_head, m.d_model);
  }
  f.mark("head_dim");
  h.max_positions = f.integer("max_position_embeddings", 2048);
  m.norm_eps = f.number("rms_norm_eps", 1e-6);
  m.rope_theta = f.number("rope_theta", 10000.0);
  m.init_std = f.number("initializer_range", 0.02);
  f.require("hidden_act", "silu", "kintsugi's " + family_name + " MLP is SwiGLU: silu");
  if (family == Family::llama) {
    f.require("attention_bias", false, "kintsugi's Llama attention has no biases");
    f.require("mlp_bias", false, "kintsugi's Llama MLP has no biases");
  }
  if (family == Family::mistral) {
    if (f.has("sliding_window")) m.sliding_window = f.integer("sliding_window");
    f.mark("sliding_window");  // null: no window
  }
  if (family == Family::qwen3)
    f.require("attention_bias", false, "kintsugi's Qwen3 attention has no biases");
  if (family == Family::qwen2 || family == Family::qwen3) {
    // Qwen2 and Qwen3 window only the layers from max_window_layers on, and only with
    // use_sliding_window.
    f.require("use_sliding_window", false,
              "kintsugi's " + family_name + " attends over the whole context in every layer");
    f.mark("sliding_window");
    f.mark("max_window_layers");
  }
  // transformers 4.53+ names each layer's attention; all must be full (or, for Mistral, all
  // windowed with sliding_window set).
  if (f.has("layer_types")) {
    const json& types = f.at("layer_types");
    const std::string want = m.sliding_window > 0 ? "sliding_attention" : "full_attention";
    if (!types.is_array() || std::any_of(types.begin(), types.end(),
                                         [&](const json& t) { return t != want; }))
      fail("{}: layer_types = {} is not supported (kintsugi's layers all attend alike: every "
           "entry \"{}\")",
           source, types.dump(), want);
  }
  f.mark("layer_types");
  if (f.has("rope_scaling")) read_rope_scaling(f.at("rope_scaling"), "rope_scaling", m, source);
  f.mark("rope_scaling");
  if (f.has("rope_parameters"))
    read_rope_scaling(f.at("rope_parameters"), "rope_parameters", m, source);
  f.mark("rope_parameters");
  if (m.rope_scaling != RopeScaling::none && m.rope_original_context == 0)
    m.rope_original_context = h.max_positions;  // YaRN's default: the file's context
  f.integer("pretraining_tp", 1);  // how Meta split the matmuls: the same function
  m.tie_embeddings = f.boolean("tie_word_embeddings", false) ? TiedHead::tied : TiedHead::untied;
  f.dropout("attention_dropout", h.notes);
  if (moe != MoeFields::none) read_moe(f, moe, family, h, source);
  f.refuse_unknown(family_name);
  return h;
}

HfModel bloom(Fields& f, const json& j, const std::string& source) {
  HfModel h = start_model(f, j, Family::bloom, "BloomForCausalLM", source);
  ModelConfig& m = h.model;
  m.d_model = f.has("n_embed") ? f.integer("n_embed") : f.integer("hidden_size");
  f.mark("n_embed");
  f.mark("hidden_size");
  m.d_ff = 4 * m.d_model;  // BloomMLP's width is fixed
  f.mark("n_inner");       // ignored by BloomForCausalLM
  m.n_layer = f.integer("n_layer");
  m.n_head = f.integer("n_head");
  m.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  m.init_std = f.number("initializer_range", 0.02);
  if (f.has("seq_length")) h.max_positions = f.integer("seq_length");  // ALiBi: a hint only
  f.mark("seq_length");
  f.require("apply_residual_connection_post_layernorm", false,
            "kintsugi's BLOOM adds the residual before the LayerNorm");
  require_tied_head(f, "BLOOM", source);
  f.integer("pretraining_tp", 1);
  f.boolean("slow_but_exact", false);
  // Megatron-DeepSpeed's kernel-fusion switches: how it computed, not what.
  for (const char* k : {"attention_softmax_in_fp32", "masked_softmax_fusion", "bias_dropout_fusion",
                        "skip_bias_add", "skip_bias_add_qkv", "offset_alibi"})
    f.mark(k);
  for (const char* p : {"hidden_dropout", "attention_dropout"}) f.dropout(p, h.notes);
  f.refuse_unknown("BLOOM");
  return h;
}

}  // namespace

std::string HfModel::field_of(const std::string& key) const {
  static const std::map<std::string, std::map<Family, std::string>> names = {
      {"model.family", {{Family::gpt2, "model_type"}, {Family::llama, "model_type"}, {Family::bloom, "model_type"}}},
      {"model.n_layer", {{Family::gpt2, "n_layer"}, {Family::llama, "num_hidden_layers"}, {Family::bloom, "n_layer"}}},
      {"model.d_model", {{Family::gpt2, "n_embd"}, {Family::llama, "hidden_size"}, {Family::bloom, "hidden_size"}}},
      {"model.n_head", {{Family::gpt2, "n_head"}, {Family::llama, "num_attention_heads"}, {Family::bloom, "n_head"}}},
      {"model.n_kv_head", {{Family::gpt2, "n_head"}, {Family::llama, "num_key_value_heads"}, {Family::bloom, "n_head"}}},
      {"model.d_ff", {{Family::gpt2, "n_inner"}, {Family::llama, "intermediate_size"}, {Family::bloom, "4 x hidden_size"}}},
      {"model.vocab_size", {{Family::gpt2, "vocab_size"}, {Family::llama, "vocab_size"}, {Family::bloom, "vocab_size"}}},
      {"model.norm_eps", {{Family::gpt2, "layer_norm_epsilon"}, {Family::llama, "rms_norm_eps"}, {Family::bloom, "layer_norm_epsilon"}}},
      {"model.rope_theta", {{Family::gpt2, "(none)"}, {Family::llama, "rope_theta"}, {Family::bloom, "(none)"}}},
      {"model.init_std", {{Family::gpt2, "initializer_range"}, {Family::llama, "initializer_range"}, {Family::bloom, "initializer_range"}}},
      {"model.seq_len", {{Family::gpt2, "n_positions"}, {Family::llama, "max_position_embeddings"}, {Family::bloom, "seq_length"}}},
      {"model.head_dim", {{Family::gpt2, "(none)"}, {Family::llama, "head_dim"}, {Family::bloom, "(none)"}}},
      {"model.sliding_window", {{Family::gpt2, "(none)"}, {Family::llama, "sliding_window"}, {Family::bloom, "(none)"}}},
      {"model.tie_embeddings", {{Family::gpt2, "tie_word_embeddings"}, {Family::llama, "tie_word_embeddings"}, {Family::bloom, "tie_word_embeddings"}}},
      {"model.rope_scaling", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.rope_type"}, {Family::bloom, "(none)"}}},
      {"model.rope_factor", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.factor"}, {Family::bloom, "(none)"}}},
      {"model.rope_low_freq_factor", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.low_freq_factor"}, {Family::bloom, "(none)"}}},
      {"model.rope_high_freq_factor", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.high_freq_factor"}, {Family::bloom, "(none)"}}},
      {"model.rope_original_context", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.original_max_position_embeddings"}, {Family::bloom, "(none)"}}},
      {"model.rope_beta_fast", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.beta_fast"}, {Family::bloom, "(none)"}}},
      {"model.rope_beta_slow", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.beta_slow"}, {Family::bloom, "(none)"}}},
      {"model.rope_attention_factor", {{Family::gpt2, "(none)"}, {Family::llama, "rope_scaling.attention_factor"}, {Family::bloom, "(none)"}}}};
  // The experts' fields: Mixtral's (imported as family mistral) or Qwen-MoE's.
  static const std::map<std::string, std::pair<std::string, std::string>> moe_names = {
      {"model.moe_experts", {"num_local_experts", "num_experts"}},
      {"model.moe_top_k", {"num_experts_per_tok", "num_experts_per_tok"}},
      {"model.moe_expert_hidden", {"intermediate_size", "moe_intermediate_size"}},
      {"model.moe_shared_hidden", {"(none)", "shared_expert_intermediate_size"}},
      {"model.moe_router_norm_topk", {"(always true)", "norm_topk_prob"}},
      {"model.moe_first_dense_layers", {"(none)", "(none)"}},
      {"model.moe_layer_freq", {"(none)", "decoder_sparse_step"}},
      {"model.moe_dense_layers", {"(none)", "mlp_only_layers"}}};
  if (auto moe = moe_names.find(key); moe != moe_names.end())
    return model.family == Family::qwen2 || model.family == Family::qwen3 ? moe->second.second
                                                                          : moe->second.first;
  auto it = names.find(key);
  if (it == names.end()) return key;
  // Mistral and Qwen2 name their fields as Llama does.
  auto field = it->second.find(model.is_llama() ? Family::llama : model.family);
  if (field == it->second.end())  // a family added to Family before its row here
    fail("{} has no Hugging Face field for model.family = \"{}\" (value {}): its fields are "
         "named for gpt2, llama and bloom",
         key, name_of(model.family), static_cast<int>(model.family));
  return field->second;
}

HfModel model_from_hf_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) fail("{} is not a JSON object", source);
  if (!config.contains("model_type") || !config.at("model_type").is_string())
    fail("{} has no model_type: it is not a Hugging Face model configuration", source);
  const std::string type = config.at("model_type").get<std::string>();
  Fields fields(config, source);
  HfModel h;
  if (type == "gpt2") {
    h = gpt2(fields, config, source);
  } else if (type == "llama") {
    h = llama_like(fields, config, source, Family::llama, "LlamaForCausalLM", "Llama");
  } else if (type == "mistral") {
    h = llama_like(fields, config, source, Family::mistral, "MistralForCausalLM", "Mistral");
  } else if (type == "qwen2") {
    h = llama_like(fields, config, source, Family::qwen2, "Qwen2ForCausalLM", "Qwen2");
  } else if (type == "qwen3") {
    h = llama_like(fields, config, source, Family::qwen3, "Qwen3ForCausalLM", "Qwen3");
  } else if (type == "mixtral") {
    h = llama_like(fields, config, source, Family::mistral, "MixtralForCausalLM", "Mixtral",
                   MoeFields::mixtral);
  } else if (type == "qwen2_moe") {
    h = llama_like(fields, config, source, Family::qwen2, "Qwen2MoeForCausalLM", "Qwen2-MoE",
                   MoeFields::qwen);
  } else if (type == "qwen3_moe") {
    h = llama_like(fields, config, source, Family::qwen3, "Qwen3MoeForCausalLM", "Qwen3-MoE",
                   MoeFields::qwen);
  } else if (type == "bloom") {
    h = bloom(fields, config, source);
  } else {
    fail("{}: model_type = \"{}\" is not supported (kintsugi loads gpt2, llama, mistral, qwen2, "
         "qwen3, bloom, mixtral, qwen2_moe and qwen3_moe)",
         source, type);
  }
  h.model.name = "custom";
  h.model.seq_len = h.max_positions > 0 ? h.max_positions : 1024;
  // Refused as the file's fields, which the user can see, not as model.* keys they never set.
  validate(h.model, {source, [&h](const std::string& key) { return h.field_of(key); }});
  return h;
}

}  // namespace kintsugi
