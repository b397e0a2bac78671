#include "kintsugi/checkpoint/hf_config.hpp"

#include <fmt/format.h>

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

HfModel llama(Fields& f, const json& j, const std::string& source) {
  HfModel h = start_model(f, j, Family::llama, "LlamaForCausalLM", source);
  ModelConfig& m = h.model;
  m.d_model = f.integer("hidden_size");
  m.d_ff = f.integer("intermediate_size");
  m.n_layer = f.integer("num_hidden_layers");
  m.n_head = f.integer("num_attention_heads");
  m.n_kv_head = f.integer("num_key_value_heads", m.n_head);
  if (m.n_head % m.n_kv_head != 0)
    fail("{}: num_key_value_heads = {} does not divide num_attention_heads = {}", source,
         m.n_kv_head, m.n_head);
  if (m.d_model % m.n_head != 0)
    fail("{}: num_attention_heads = {} does not divide hidden_size = {}", source, m.n_head,
         m.d_model);
  if (f.has("head_dim") && f.integer("head_dim") != m.d_model / m.n_head)
    fail("{}: head_dim = {} is not supported (kintsugi's head size is hidden_size / "
         "num_attention_heads = {})",
         source, f.integer("head_dim"), m.d_model / m.n_head);
  f.mark("head_dim");
  h.max_positions = f.integer("max_position_embeddings", 2048);
  m.norm_eps = f.number("rms_norm_eps", 1e-6);
  m.rope_theta = f.number("rope_theta", 10000.0);
  m.init_std = f.number("initializer_range", 0.02);
  f.require("hidden_act", "silu", "kintsugi's Llama MLP is SwiGLU: silu");
  f.require("attention_bias", false, "kintsugi's Llama attention has no biases");
  f.require("mlp_bias", false, "kintsugi's Llama MLP has no biases");
  f.refuse("rope_scaling", "kintsugi's RoPE has no scaling: rope_theta only");
  // transformers 5 writes rope_theta (and any scaling) inside rope_parameters.
  if (f.has("rope_parameters")) {
    const json& r = f.at("rope_parameters");
    if (!r.is_object()) fail("{}: rope_parameters = {} is not an object", source, r.dump());
    for (const auto& [k, v] : r.items()) {
      if (k == "rope_theta" && v.is_number()) {
        m.rope_theta = v.get<double>();
        if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta))
          fail("{}: rope_parameters.rope_theta = {} must be a positive number", source, v.dump());
      } else if (k != "rope_type" || v != "default") {
        fail("{}: rope_parameters.{} = {} is not supported (kintsugi's RoPE has no scaling: "
             "rope_theta only)",
             source, k, v.dump());
      }
    }
  }
  f.mark("rope_parameters");
  f.integer("pretraining_tp", 1);  // how Meta split the matmuls: the same function
  h.head_from_embedding = f.boolean("tie_word_embeddings", false);
  if (h.head_from_embedding)
    h.notes.push_back(fmt::format(
        "note: {} ties the LM head to the token embedding; kintsugi's Llama has an untied head, "
        "which starts as a copy of the embedding and then trains on its own",
        source));
  f.dropout("attention_dropout", h.notes);
  f.refuse_unknown("Llama");
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
      {"model.seq_len", {{Family::gpt2, "n_positions"}, {Family::llama, "max_position_embeddings"}, {Family::bloom, "seq_length"}}}};
  auto it = names.find(key);
  if (it == names.end()) return key;
  auto field = it->second.find(model.family);
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
    h = llama(fields, config, source);
  } else if (type == "bloom") {
    h = bloom(fields, config, source);
  } else {
    fail("{}: model_type = \"{}\" is not supported (kintsugi loads gpt2, llama and bloom)", source,
         type);
  }
  h.model.name = "custom";
  h.model.seq_len = h.max_positions > 0 ? h.max_positions : 1024;
  // Refused as the file's fields, which the user can see, not as model.* keys they never set.
  validate(h.model, {source, [&h](const std::string& key) { return h.field_of(key); }});
  return h;
}

}  // namespace kintsugi
