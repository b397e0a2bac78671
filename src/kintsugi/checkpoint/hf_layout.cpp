#include "kintsugi/checkpoint/hf_layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

std::vector<HfTensor> gpt2_tensors(const ModelConfig& c) {
  using C = HfConversion;
  std::vector<HfTensor> t = {{"embedding.token.weight", "transformer.wte.weight", C::none},
                             {"embedding.position.weight", "transformer.wpe.weight", C::none}};
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string ours = fmt::format("blocks.{}.", i), theirs = fmt::format("transformer.h.{}.", i);
    const std::vector<HfTensor> block = {
        {"ln1.weight", "ln_1.weight", C::none},
        {"ln1.bias", "ln_1.bias", C::none},
        {"attn.qkv.weight", "attn.c_attn.weight", C::fused_qkv_weight},
        {"attn.qkv.bias", "attn.c_attn.bias", C::fused_qkv},
        {"attn.proj.weight", "attn.c_proj.weight", C::transpose},
        {"attn.proj.bias", "attn.c_proj.bias", C::none},
        {"ln2.weight", "ln_2.weight", C::none},
        {"ln2.bias", "ln_2.bias", C::none},
        {"mlp.fc.weight", "mlp.c_fc.weight", C::transpose},
        {"mlp.fc.bias", "mlp.c_fc.bias", C::none},
        {"mlp.fc2.weight", "mlp.c_proj.weight", C::transpose},
        {"mlp.fc2.bias", "mlp.c_proj.bias", C::none}};
    for (const auto& b : block) t.push_back({ours + b.ours, theirs + b.theirs, b.conversion});
  }
  t.push_back({"final_norm.weight", "transformer.ln_f.weight", C::none});
  t.push_back({"final_norm.bias", "transformer.ln_f.bias", C::none});
  return t;
}

std::vector<HfTensor> llama_tensors(const ModelConfig& c) {
  using C = HfConversion;
  std::vector<HfTensor> t = {{"embedding.token.weight", "model.embed_tokens.weight", C::none}};
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string ours = fmt::format("blocks.{}.", i), theirs = fmt::format("model.layers.{}.", i);
    const std::vector<HfTensor> block = {
        {"ln1.weight", "input_layernorm.weight", C::none},
        {"attn.qkv.weight", "self_attn.q_proj.weight", C::qkv_q},
        {"attn.qkv.weight", "self_attn.k_proj.weight", C::qkv_k},
        {"attn.qkv.weight", "self_attn.v_proj.weight", C::qkv_v},
        {"attn.proj.weight", "self_attn.o_proj.weight", C::none},
        {"ln2.weight", "post_attention_layernorm.weight", C::none},
        {"mlp.gate.weight", "mlp.gate_proj.weight", C::none},
        {"mlp.up.weight", "mlp.up_proj.weight", C::none},
        {"mlp.down.weight", "mlp.down_proj.weight", C::none}};
    for (const auto& b : block) t.push_back({ours + b.ours, theirs + b.theirs, b.conversion});
    if (c.qkv_bias())  // Qwen2's
      for (const auto& [part, conversion] : {std::pair{"q", C::qkv_q}, std::pair{"k", C::qkv_k},
                                             std::pair{"v", C::qkv_v}})
        t.push_back({ours + "attn.qkv.bias", theirs + "self_attn." + part + "_proj.bias",
                     conversion});
    if (c.qk_norm())  // Qwen3's
      for (const char* norm : {"q_norm", "k_norm"})
        t.push_back({ours + "attn." + norm + ".weight", theirs + "self_attn." + norm + ".weight",
                     C::none});
  }
  t.push_back({"final_norm.weight", "model.norm.weight", C::none});
  if (!c.tied_embeddings()) t.push_back({"head.weight", "lm_head.weight", C::none});
  return t;
}

std::vector<HfTensor> bloom_tensors(const ModelConfig& c) {
  using C = HfConversion;
  std::vector<HfTensor> t = {
      {"embedding.token.weight", "transformer.word_embeddings.weight", C::none},
      {"embedding.norm.weight", "transformer.word_embeddings_layernorm.weight", C::none},
      {"embedding.norm.bias", "transformer.word_embeddings_layernorm.bias", C::none}};
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string ours = fmt::format("blocks.{}.", i), theirs = fmt::format("transformer.h.{}.", i);
    const std::vector<HfTensor> block = {
        {"ln1.weight", "input_layernorm.weight", C::none},
        {"ln1.bias", "input_layernorm.bias", C::none},
        {"attn.qkv.weight", "self_attention.query_key_value.weight", C::none},
        {"attn.qkv.bias", "self_attention.query_key_value.bias", C::none},
        {"attn.proj.weight", "self_attention.dense.weight", C::none},
        {"attn.proj.bias", "self_attention.dense.bias", C::none},
        {"ln2.weight", "post_attention_layernorm.weight", C::none},
        {"ln2.bias", "post_attention_layernorm.bias", C::none},
        {"mlp.fc.weight", "mlp.dense_h_to_4h.weight", C::none},
        {"mlp.fc.bias", "mlp.dense_h_to_4h.bias", C::none},
        {"mlp.fc2.weight", "mlp.dense_4h_to_h.weight", C::none},
        {"mlp.fc2.bias", "mlp.dense_4h_to_h.bias", C::none}};
    for (const auto& b : block) t.push_back({ours + b.ours, theirs + b.theirs, b.conversion});
  }
  t.push_back({"final_norm.weight", "transformer.ln_f.weight", C::none});
  t.push_back({"final_norm.bias", "transformer.ln_f.bias", C::none});
  return t;
}

// Row r of our per-head packing -> row of the q | k | v packing. Per kv head: `group` query
// heads, its key, its value (attention_common.hpp).
std::int64_t fused_row(const ModelConfig& c, std::int64_t r) {
  const std::int64_t hd = c.head_dim(), kv = c.kv_heads(), group = c.n_head / kv;
  const std::int64_t block = r / hd, j = r % hd;
  const std::int64_t kvh = block / (group + 2), s = block % (group + 2);
  if (s < group) return (kvh * group + s) * hd + j;            // query head kvh * group + s
  if (s == group) return (c.n_head + kvh) * hd + j;            // key of kv head kvh
  return (c.n_head + kv + kvh) * hd + j;                       // value
}

NamedTensor transpose(const NamedTensor& t) {
  KINTSUGI_ASSERT(t.shape.size() == 2);
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  NamedTensor out{{cols, rows}, std::vector<float>(t.values.size())};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out.values[c * rows + r] = t.values[r * cols + c];
  return out;
}

// Regroups the rows (dimension 0) of a fused qkv tensor; `forward`: ours -> theirs.
NamedTensor regroup(const ModelConfig& c, const NamedTensor& t, bool forward) {
  const std::int64_t rows = t.shape[0];
  const std::int64_t width = static_cast<std::int64_t>(t.values.size()) / rows;
  NamedTensor out{t.shape, std::vector<float>(t.values.size())};
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t f = fused_row(c, r);
    const std::int64_t from = forward ? r : f, to = forward ? f : r;
    std::copy_n(t.values.begin() + from * width, width, out.values.begin() + to * width);
  }
  return out;
}

NamedTensor rows(const NamedTensor& t, RowRange r) {
  const std::int64_t width = static_cast<std::int64_t>(t.values.size()) / t.shape[0];
  NamedTensor out{t.shape, {}};
  out.shape[0] = r.end - r.begin;
  out.values.assign(t.values.begin() + r.begin * width, t.values.begin() + r.end * width);
  return out;
}

}  // namespace

bool is_qkv_part(HfConversion c) {
  return c == HfConversion::qkv_q || c == HfConversion::qkv_k || c == HfConversion::qkv_v;
}

RowRange qkv_part_rows(HfConversion c, const ModelConfig& config) {
  const std::int64_t q = config.n_head * config.head_dim(), kv = config.kv_heads() * config.head_dim();
  switch (c) {
    case HfConversion::qkv_q: return {0, q};
    case HfConversion::qkv_k: return {q, q + kv};
    case HfConversion::qkv_v: return {q + kv, q + 2 * kv};
    default: KINTSUGI_ASSERT(!"not a qkv part");
  }
  return {};
}

std::vector<HfTensor> hf_tensors(const ModelConfig& config) {
  if (config.is_moe())
    fail("model.moe_experts = {}: Hugging Face export of mixture-of-experts models (Mixtral, "
         "Qwen2-MoE) is not built yet (docs/moe.md)",
         config.moe.experts);
  if (config.family == Family::gpt2) return gpt2_tensors(config);
  if (config.is_llama()) return llama_tensors(config);
  if (config.family == Family::bloom) {
    if (config.d_ff != 4 * config.d_model)
      fail("Hugging Face's BLOOM has an MLP of 4 x hidden size; model.d_ff = {} is not 4 x {}",
           config.d_ff, config.d_model);
    return bloom_tensors(config);
  }
  fail("export and import of model.family = \"{}\" are not supported", name_of(config.family));
}

namespace {

// config.json's rope_scaling: the fields Hugging Face's modeling_rope_utils reads for the type.
nlohmann::json rope_scaling_json(const ModelConfig& c) {
  nlohmann::json r = {{"rope_type", name_of(c.rope_scaling)}, {"factor", c.rope_factor}};
  if (c.rope_scaling == RopeScaling::llama3) {
    r["low_freq_factor"] = c.rope_low_freq_factor;
    r["high_freq_factor"] = c.rope_high_freq_factor;
  }
  if (c.rope_scaling == RopeScaling::llama3 || c.rope_scaling == RopeScaling::yarn)
    r["original_max_position_embeddings"] =
        c.rope_original_context > 0 ? c.rope_original_context : c.seq_len;
  if (c.rope_scaling == RopeScaling::yarn) {
    r["beta_fast"] = c.rope_beta_fast;
    r["beta_slow"] = c.rope_beta_slow;
    if (c.rope_attention_factor > 0) r["attention_factor"] = c.rope_attention_factor;
  }
  return r;
}

// Llama's block as Llama, Mistral, Qwen2 and Qwen3 write it.
nlohmann::json llama_like_config(const ModelConfig& c) {
  // Only Mistral's config.json carries a window that its model applies: Hugging Face's Llama
  // and Qwen2 (use_sliding_window false) would attend over the whole context.
  if (c.sliding_window > 0 && c.family != Family::mistral)
    fail("model.sliding_window = {} has no Hugging Face config.json for model.family = \"{}\" "
         "(its model attends over the whole context): export it as model.family = \"mistral\"",
         c.sliding_window, name_of(c.family));
  const auto [architecture, type] =
      c.family == Family::mistral ? std::pair{"MistralForCausalLM", "mistral"}
      : c.family == Family::qwen2 ? std::pair{"Qwen2ForCausalLM", "qwen2"}
      : c.family == Family::qwen3 ? std::pair{"Qwen3ForCausalLM", "qwen3"}
                                  : std::pair{"LlamaForCausalLM", "llama"};
  nlohmann::json j = {{"architectures", {architecture}},
                      {"model_type", type},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.d_model},
                      {"intermediate_size", c.d_ff},
                      {"num_hidden_layers", c.n_layer},
                      {"num_attention_heads", c.n_head},
                      {"num_key_value_heads", c.kv_heads()},
                      {"max_position_embeddings", c.seq_len},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_scaling", nullptr},
                      {"hidden_act", "silu"},
                      {"initializer_range", c.init_std},
                      {"tie_word_embeddings", c.tied_embeddings()},
                      {"torch_dtype", "float32"}};
  // Else hidden_size / num_attention_heads, but for Qwen3, whose Qwen3Config defaults to 128.
  if (c.head_size > 0 || c.family == Family::qwen3) j["head_dim"] = c.head_dim();
  if (c.rope_scaling != RopeScaling::none) j["rope_scaling"] = rope_scaling_json(c);
  if (c.family == Family::llama) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (c.family == Family::mistral)
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  if (c.family == Family::qwen2 || c.family == Family::qwen3) j["use_sliding_window"] = false;
  if (c.family == Family::qwen3) j["attention_bias"] = false;
  return j;
}

}  // namespace

nlohmann::json hf_config(const ModelConfig& c) {
  if (c.is_moe()) hf_tensors(c);  // refuses it: no Hugging Face layout yet
  if (c.is_llama()) return llama_like_config(c);
  if (c.family == Family::bloom)
    return {{"architectures", {"BloomForCausalLM"}},
            {"model_type", "bloom"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"layer_norm_epsilon", c.norm_eps},
            {"initializer_range", c.init_std},
            {"apply_residual_connection_post_layernorm", false},
            {"hidden_dropout", 0.0},
            {"attention_dropout", 0.0},
            {"pretraining_tp", 1},
            {"slow_but_exact", false},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  // A family added to Family without a config.json of its own must not pass as GPT-2.
  if (c.family != Family::gpt2)
    fail("a Hugging Face config.json for model.family = \"{}\" (value {}) is not written: "
         "export supports gpt2, llama, mistral, qwen2, qwen3 and bloom",
         name_of(c.family), static_cast<int>(c.family));
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.seq_len},
          {"n_ctx", c.seq_len},
          {"n_embd", c.d_model},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", c.d_ff},
          {"activation_function", "gelu_new"},  // the tanh approximation
          {"layer_norm_epsilon", c.norm_eps},
          {"initializer_range", c.init_std},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

std::string hf_base_name(const std::string& name) {
  for (const char* prefix : {"transformer.", "model."})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
  return name;
}

std::int64_t hf_block_count(const std::vector<std::string>& names) {
  std::int64_t blocks = 0;
  for (const std::string& name : names) {
    const std::string base = hf_base_name(name);
    for (const std::string_view prefix : {"h.", "layers."}) {
      if (!base.starts_with(prefix)) continue;
      std::int64_t block = 0;
      const char* first = base.data() + prefix.size();
      const auto [end, ec] = std::from_chars(first, base.data() + base.size(), block);
      if (ec == std::errc() && end != first && *end == '.' && block < INT64_MAX)
        blocks = std::max(blocks, block + 1);
    }
  }
  return blocks;
}

HfElement hf_element(HfConversion c, const ModelConfig& config, std::int64_t rows,
                     std::int64_t cols, std::int64_t g) {
  const std::int64_t r = g / cols, col = g % cols;
  switch (c) {
    case HfConversion::none: return {0, g};
    case HfConversion::transpose: return {0, col * rows + r};
    case HfConversion::fused_qkv: return {0, fused_row(config, r)};
    case HfConversion::fused_qkv_weight: return {0, col * rows + fused_row(config, r)};
    case HfConversion::qkv_q:
    case HfConversion::qkv_k:
    case HfConversion::qkv_v: {
      const std::int64_t f = fused_row(config, r);
      const std::int64_t q = config.n_head * config.head_dim();
      const std::int64_t kv = config.kv_heads() * config.head_dim();
      if (f < q) return {0, f * cols + col};
      if (f < q + kv) return {1, (f - q) * cols + col};
      return {2, (f - q - kv) * cols + col};
    }
  }
  return {0, g};
}

std::vector<std::int64_t> hf_shape(HfConversion c, const ModelConfig& config,
                                   const std::vector<std::int64_t>& ours) {
  switch (c) {
    case HfConversion::transpose:
    case HfConversion::fused_qkv_weight: return {ours.at(1), ours.at(0)};
    case HfConversion::qkv_q:
    case HfConversion::qkv_k:
    case HfConversion::qkv_v: {
      const RowRange r = qkv_part_rows(c, config);
      if (ours.size() == 1) return {r.end - r.begin};  // a bias (Qwen2's)
      return {r.end - r.begin, ours.at(1)};
    }
    default: return ours;
  }
}

std::vector<std::int64_t> our_shape(const std::string& name, const ModelConfig& c) {
  const std::int64_t d = c.d_model, qkv = (c.n_head + 2 * c.kv_heads()) * c.head_dim();
  const std::int64_t attn = c.n_head * c.head_dim();
  auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
  if (name == "embedding.token.weight" || name == "head.weight") return {c.vocab_size, d};
  if (name == "embedding.position.weight") return {c.seq_len, d};
  if (ends("attn.qkv.weight")) return {qkv, d};
  if (ends("attn.qkv.bias")) return {qkv};
  if (ends("attn.proj.weight")) return {d, attn};
  if (ends("mlp.fc.weight") || ends("mlp.gate.weight") || ends("mlp.up.weight")) return {c.d_ff, d};
  if (ends("mlp.fc.bias")) return {c.d_ff};
  if (ends("mlp.fc2.weight") || ends("mlp.down.weight")) return {d, c.d_ff};
  if (ends("attn.q_norm.weight") || ends("attn.k_norm.weight")) return {c.head_dim()};
  return {d};  // norms' weights and biases, the projections' output biases
}

NamedTensor to_hf(const HfTensor& t, const ModelConfig& c, const NamedTensor& ours) {
  switch (t.conversion) {
    case HfConversion::none: return ours;
    case HfConversion::transpose: return transpose(ours);
    case HfConversion::fused_qkv: return regroup(c, ours, true);
    case HfConversion::fused_qkv_weight: return transpose(regroup(c, ours, true));
    case HfConversion::qkv_q:
    case HfConversion::qkv_k:
    case HfConversion::qkv_v: return rows(regroup(c, ours, true), qkv_part_rows(t.conversion, c));
  }
  return ours;
}

NamedTensor from_hf(const HfTensor& t, const ModelConfig& c, const NamedTensor& theirs) {
  switch (t.conversion) {
    case HfConversion::none: return theirs;
    case HfConversion::transpose: return transpose(theirs);
    case HfConversion::fused_qkv: return regroup(c, theirs, false);
    case HfConversion::fused_qkv_weight: return regroup(c, transpose(theirs), false);
    case HfConversion::qkv_q:
    case HfConversion::qkv_k:
    case HfConversion::qkv_v: return regroup(c, theirs, false);  // the assembled q | k | v
  }
  return theirs;
}

}  // namespace kintsugi
