#include "kintsugi/checkpoint/hf_layout.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Whether a mixture of experts goes out as Mixtral (Llama's and Mistral's block; Mixtral's
// names) rather than as Qwen2-MoE or Qwen3-MoE (their block; Qwen's names).
bool mixtral_style(const ModelConfig& c) {
  return c.family == Family::llama || c.family == Family::mistral;
}

// A MoE block's MLP half (docs/moe.md): the router, each expert's w1 (gate), w3 (up) and w2
// (down), and Qwen2-MoE's shared expert and its gate. Every tensor keeps its layout.
void moe_tensors(const ModelConfig& c, const std::string& ours, const std::string& theirs,
                 std::vector<HfTensor>& t) {
  using C = HfConversion;
  if (mixtral_style(c)) {
    const std::string m = theirs + "block_sparse_moe.";
    t.push_back({ours + "router.weight", m + "gate.weight", C::none});
    for (std::int64_t e = 0; e < c.moe.experts; ++e)
      for (const char* w : {"w1", "w2", "w3"})
        t.push_back({fmt::format("{}experts.{}.{}.weight", ours, e, w),
                     fmt::format("{}experts.{}.{}.weight", m, e, w), C::none});
    return;
  }
  const std::string m = theirs + "mlp.";
  t.push_back({ours + "router.weight", m + "gate.weight", C::none});
  for (std::int64_t e = 0; e < c.moe.experts; ++e)
    for (const auto& [w, proj] : {std::pair{"w1", "gate"}, std::pair{"w2", "down"},
                                  std::pair{"w3", "up"}})
      t.push_back({fmt::format("{}experts.{}.{}.weight", ours, e, w),
                   fmt::format("{}experts.{}.{}_proj.weight", m, e, proj), C::none});
  if (c.shared_hidden() > 0) {
    for (const char* part : {"gate", "up", "down"})
      t.push_back({ours + "shared_expert." + part + ".weight",
                   m + "shared_expert." + part + "_proj.weight", C::none});
    t.push_back({ours + "shared_expert_gate.weight", m + "shared_expert_gate.weight", C::none});
  }
}

// What a Hugging Face class of the model's family cannot hold; kintsugi::Error naming it.
void check_moe_exportable(const ModelConfig& c) {
  // DeepSeek-style routing (docs/moe.md): no Mixtral or Qwen-MoE class computes it.
  const MoeConfig& m = c.moe;
  if (m.score != RouterScore::softmax || m.routed_scaling != 1.0 || m.groups != 1 ||
      m.bias_update_rate != 0)
    fail("model.moe_router_score = \"{}\", moe_routed_scaling_factor = {}, moe_router_groups = "
         "{}, moe_router_bias_update_rate = {}: DeepSeek-style routing has no Mixtral or "
         "Qwen-MoE export (a DeepSeek-V3 export is not built: docs/moe.md)",
         name_of(m.score), m.routed_scaling, m.groups, m.bias_update_rate);
  if (mixtral_style(c)) {
    if (c.moe.has_dense_blocks(c.n_layer))
      fail("model.moe_first_dense_layers = {}, model.moe_layer_freq = {} and "
           "model.moe_dense_layers = [{}] make some blocks dense: every Mixtral block is a "
           "mixture of experts; model.family = \"qwen2\" or \"qwen3\" exports Qwen2-MoE or "
           "Qwen3-MoE, which may have dense blocks",
           c.moe.first_dense, c.moe.layer_freq, fmt::join(c.moe.dense_layers, ", "));
    if (c.shared_hidden() > 0)
      fail("model.moe_shared_experts = {}: Mixtral has no shared expert; model.family = "
           "\"qwen2\" exports Qwen2-MoE, which has one",
           c.moe.shared_experts);
    if (!c.moe.renormalize)
      fail("model.moe_router_norm_topk = false: Mixtral always renormalises its top-k gates; "
           "model.family = \"qwen3\" exports Qwen3-MoE, whose norm_topk_prob may be false");
    return;
  }
  if (c.family == Family::qwen2 && c.shared_hidden() == 0)
    fail("model.family = \"qwen2\" with experts exports Qwen2-MoE, whose blocks have a shared "
         "expert: set model.moe_shared_experts, or use family \"qwen3\" (Qwen3-MoE) or "
         "\"mistral\" (Mixtral)");
  if (c.family == Family::qwen3 && c.shared_hidden() > 0)
    fail("model.moe_shared_experts = {}: Qwen3-MoE has no shared expert; model.family = "
         "\"qwen2\" exports Qwen2-MoE, which has one",
         c.moe.shared_experts);
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
        {"ln2.weight", "post_attention_layernorm.weight", C::none}};
    for (const auto& b : block) t.push_back({ours + b.ours, theirs + b.theirs, b.conversion});
    if (c.is_moe_block(i))
      moe_tensors(c, ours + "moe.", theirs, t);
    else
      for (const char* part : {"gate", "up", "down"})
        t.push_back({ours + "mlp." + part + ".weight", theirs + "mlp." + part + "_proj.weight",
                     C::none});
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
  if (config.is_moe()) check_moe_exportable(config);
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

// Mixtral's, Qwen2-MoE's or Qwen3-MoE's config.json: the family's, with the experts' fields.
nlohmann::json moe_config(const ModelConfig& c) {
  check_moe_exportable(c);
  if (mixtral_style(c)) {
    // Mixtral's attention is Mistral's: its sliding_window (null: the whole context).
    ModelConfig mistral = c;
    mistral.family = Family::mistral;
    nlohmann::json j = llama_like_config(mistral);
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    j["intermediate_size"] = c.expert_hidden();
    j["num_local_experts"] = c.moe.experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
    return j;
  }
  nlohmann::json j = llama_like_config(c);
  const bool qwen2 = c.family == Family::qwen2;
  j["architectures"] = {qwen2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  j["model_type"] = qwen2 ? "qwen2_moe" : "qwen3_moe";
  j["intermediate_size"] = c.d_ff;  // the width of dense blocks (model.d_ff)
  j["moe_intermediate_size"] = c.expert_hidden();
  j["num_experts"] = c.moe.experts;
  j["num_experts_per_tok"] = c.moe.top_k;
  j["norm_topk_prob"] = c.moe.renormalize;
  // Qwen's rule for MoE blocks, (i + 1) % decoder_sparse_step == 0 and i not in
  // mlp_only_layers: our model.moe_layer_freq as the step when no block off it is a MoE block
  // (model.moe_first_dense_layers a multiple of it), else 1; the dense blocks on the step listed.
  std::int64_t step = c.moe.layer_freq;
  for (std::int64_t i = 0; i < c.n_layer; ++i)
    if ((i + 1) % step != 0 && c.is_moe_block(i)) step = 1;
  nlohmann::json only = nlohmann::json::array();
  for (std::int64_t i = 0; i < c.n_layer; ++i)
    if ((i + 1) % step == 0 && !c.is_moe_block(i)) only.push_back(i);
  j["decoder_sparse_step"] = step;
  j["mlp_only_layers"] = only;
  j["output_router_logits"] = false;
  if (qwen2) j["shared_expert_intermediate_size"] = c.shared_hidden();
  return j;
}

}  // namespace

nlohmann::json hf_config(const ModelConfig& c) {
  if (c.is_moe()) {
    if (!c.is_llama())
      fail("model.family = \"{}\" has no mixture of experts to export", name_of(c.family));
    return moe_config(c);
  }
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
  // A MoE block's (docs/moe.md); "shared_expert.gate" is not the dense "mlp.gate".
  const std::int64_t eh = c.expert_hidden(), sh = c.shared_hidden();
  if (ends("moe.router.weight")) return {c.moe.experts, d};
  if (ends(".w1.weight") || ends(".w3.weight")) return {eh, d};
  if (ends(".w2.weight")) return {d, eh};
  if (ends("shared_expert.gate.weight") || ends("shared_expert.up.weight")) return {sh, d};
  if (ends("shared_expert.down.weight")) return {d, sh};
  if (ends("shared_expert_gate.weight")) return {1, d};
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
