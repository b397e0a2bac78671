#include "kintsugi/checkpoint/hf_layout.hpp"

#include <fmt/format.h>

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

}  // namespace

std::vector<HfTensor> hf_tensors(const ModelConfig& config) {
  if (config.family == "gpt2") return gpt2_tensors(config);
  fail("export and import of model.family = \"{}\" are not supported yet (gpt2 is)", config.family);
}

nlohmann::json hf_config(const ModelConfig& c) {
  if (c.family != "gpt2")
    fail("export of model.family = \"{}\" is not supported yet (gpt2 is)", c.family);
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
          {"bos_token_id", 50256},
          {"eos_token_id", 50256},
          {"torch_dtype", "float32"}};
}

std::string hf_base_name(const std::string& name) {
  for (const char* prefix : {"transformer.", "model."})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
  return name;
}

NamedTensor to_hf(const HfTensor& t, const ModelConfig& c, const NamedTensor& ours) {
  switch (t.conversion) {
    case HfConversion::none: return ours;
    case HfConversion::transpose: return transpose(ours);
    case HfConversion::fused_qkv: return regroup(c, ours, true);
    case HfConversion::fused_qkv_weight: return transpose(regroup(c, ours, true));
  }
  return ours;
}

NamedTensor from_hf(const HfTensor& t, const ModelConfig& c, const NamedTensor& theirs) {
  switch (t.conversion) {
    case HfConversion::none: return theirs;
    case HfConversion::transpose: return transpose(theirs);
    case HfConversion::fused_qkv: return regroup(c, theirs, false);
    case HfConversion::fused_qkv_weight: return regroup(c, transpose(theirs), false);
  }
  return theirs;
}

}  // namespace kintsugi
