#include "kintsugi/model/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::int64_t ModelConfig::padded_vocab(std::int64_t tp) const {
  const std::int64_t multiple = std::max<std::int64_t>(1, vocab_pad_multiple) * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::int64_t MoeConfig::capacity(std::int64_t rows) const {
  if (capacity_factor <= 0) return 0;
  return static_cast<std::int64_t>(
      std::ceil(capacity_factor * static_cast<double>(rows * top_k) / static_cast<double>(experts)));
}

void refuse_router_bias_inference(const ModelConfig& c, const char* command) {
  if (c.is_moe() && c.moe.bias_update_rate > 0)
    fail("kintsugi {} of a model with model.moe_router_bias_update_rate = {}: the "
         "auxiliary-loss-free balancing bias that routes its tokens is kept in the manifests of "
         "a saved model and a training checkpoint, not with --init-from's weights; give the "
         "directory with --checkpoint (docs/moe.md, \"DeepSeek-style routing\")",
         command, c.moe.bias_update_rate);
}

bool MoeConfig::moe_block(std::int64_t index) const {
  if (layer_freq < 1 || index < first_dense || (index - first_dense + 1) % layer_freq != 0)
    return false;
  return std::find(dense_layers.begin(), dense_layers.end(), index) == dense_layers.end();
}

bool MoeConfig::has_dense_blocks(std::int64_t n_layer) const {
  if (experts == 0) return false;
  for (std::int64_t i = 0; i < n_layer; ++i)
    if (!moe_block(i)) return true;
  return false;
}

std::int64_t ModelConfig::moe_blocks(std::int64_t first, std::int64_t count) const {
  if (count < 0) count = n_layer - first;
  std::int64_t n = 0;
  for (std::int64_t i = first; i < first + count; ++i) n += is_moe_block(i) ? 1 : 0;
  return n;
}

void validate(const ModelConfig& c, const ModelFieldNames& names) {
  const std::string at = names.file.empty() ? "" : names.file + ": ";
  auto key = [&](const char* field) {
    const std::string k = fmt::format("model.{}", field);
    return names.field ? names.field(k) : k;
  };
  auto positive = [&](const char* field, std::int64_t v) {
    if (v <= 0) fail("{}{} = {} must be positive", at, key(field), v);
  };
  positive("n_layer", c.n_layer);
  positive("d_model", c.d_model);
  positive("n_head", c.n_head);
  positive("d_ff", c.d_ff);
  positive("vocab_size", c.vocab_size);
  positive("seq_len", c.seq_len);
  positive("vocab_pad_multiple", c.vocab_pad_multiple);
  // Blocks are numbered and split into pipeline stages in ints (parallel/stage_partition.hpp).
  if (c.n_layer > std::numeric_limits<int>::max())
    fail("model.n_layer = {} is more blocks than kintsugi numbers (at most {})", c.n_layer,
         std::numeric_limits<int>::max());
  if (c.head_size < 0)
    fail("{}{} = {} must not be negative (0: d_model / n_head)", at, key("head_dim"), c.head_size);
  if (c.head_size == 0 && c.d_model % c.n_head != 0)
    fail("{}{} = {} is not divisible by {} = {}: change one so that {} / {} is a whole head size",
         at, key("d_model"), c.d_model, key("n_head"), c.n_head, key("d_model"), key("n_head"));
  if (c.n_kv_head < 0)
    fail("{}{} = {} must not be negative (0: n_head)", at, key("n_kv_head"), c.n_kv_head);
  if (c.n_head % c.kv_heads() != 0)
    fail("{}{} = {} is not a multiple of {} = {}: each key/value head serves a whole group of "
         "query heads",
         at, key("n_head"), c.n_head, key("n_kv_head"), c.kv_heads());
  if (c.uses_rope() && c.head_dim() % 2 != 0)
    fail("{}{} = {} must be even: rotary embeddings rotate pairs of dimensions", at,
         c.head_size > 0 ? key("head_dim") : key("d_model") + " / " + key("n_head"), c.head_dim());
  if (c.head_size > 0 && !c.is_llama())
    fail("{}{} = {} needs Llama's block (llama, mistral, qwen2, qwen3): {}'s head size is d_model / "
         "n_head",
         at, key("head_dim"), c.head_size, name_of(c.family));
  if (!(c.rope_theta > 0)) fail("{}{} = {} must be positive", at, key("rope_theta"), c.rope_theta);
  if (c.rope_scaling != RopeScaling::none && !c.uses_rope())
    fail("{}{} = \"{}\" needs rotary embeddings, which model.family = \"{}\" does not use", at,
         key("rope_scaling"), name_of(c.rope_scaling), name_of(c.family));
  if (c.rope_scaling != RopeScaling::none) {
    if (!(c.rope_factor >= 1))
      fail("{}{} = {} must be at least 1 (it stretches the context)", at, key("rope_factor"),
           c.rope_factor);
    if (c.rope_original_context < 0)
      fail("{}{} = {} must not be negative (0: model.seq_len)", at, key("rope_original_context"),
           c.rope_original_context);
  }
  if (c.rope_scaling == RopeScaling::llama3 &&
      !(c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor))
    fail("{}{} = {} and {} = {} must be positive with the high one larger", at,
         key("rope_low_freq_factor"), c.rope_low_freq_factor, key("rope_high_freq_factor"),
         c.rope_high_freq_factor);
  if (c.rope_scaling == RopeScaling::yarn &&
      !(c.rope_beta_fast > 0 && c.rope_beta_slow > 0 && c.rope_attention_factor >= 0))
    fail("{}{} = {}, {} = {} must be positive and {} = {} not negative", at,
         key("rope_beta_fast"), c.rope_beta_fast, key("rope_beta_slow"), c.rope_beta_slow,
         key("rope_attention_factor"), c.rope_attention_factor);
  if (c.sliding_window < 0)
    fail("{}{} = {} must not be negative (0: no window)", at, key("sliding_window"),
         c.sliding_window);
  if (c.vocab_size > (std::int64_t{1} << 31) - 1)
    fail("{}{} = {} does not fit 32-bit token ids", at, key("vocab_size"), c.vocab_size);
  if (!(c.norm_eps > 0)) fail("{}{} = {} must be positive", at, key("norm_eps"), c.norm_eps);
  const MoeConfig& moe = c.moe;
  if (moe.experts < 0)
    fail("{}{} = {} must not be negative (0: a dense MLP)", at, key("moe_experts"), moe.experts);
  if (c.is_moe()) {
    if (!c.gated_mlp())
      fail("{}{} = {} needs SwiGLU experts, which model.family = \"{}\" does not have: use a "
           "family of Llama's block (llama, mistral, qwen2, qwen3)",
           at, key("moe_experts"), moe.experts, name_of(c.family));
    if (moe.top_k < 1 || moe.top_k > moe.experts)
      fail("{}{} = {} must be between 1 and {} = {}", at, key("moe_top_k"), moe.top_k,
           key("moe_experts"), moe.experts);
    if (moe.expert_hidden < 0)
      fail("{}{} = {} must not be negative (0: model.d_ff)", at, key("moe_expert_hidden"),
           moe.expert_hidden);
    if (moe.shared_experts < 0 || moe.shared_hidden < 0)
      fail("{}{} = {} and {} = {} must not be negative", at, key("moe_shared_experts"),
           moe.shared_experts, key("moe_shared_hidden"), moe.shared_hidden);
    if (!(moe.capacity_factor >= 0))
      fail("{}{} = {} must not be negative (0: dropless; e.g. 1.25 keeps 1.25 x the balanced "
           "share of each expert)",
           at, key("moe_capacity_factor"), moe.capacity_factor);
    if (moe.groups < 1 || moe.experts % moe.groups != 0)
      fail("{}{} = {} must divide {} = {} (1: no groups)", at, key("moe_router_groups"),
           moe.groups, key("moe_experts"), moe.experts);
    if (moe.groups > 64)  // the CUDA router keeps a row's groups in a 64-bit mask
      fail("{}{} = {}: at most 64 groups (DeepSeek-V3 has 8)", at, key("moe_router_groups"),
           moe.groups);
    if (moe.topk_groups < 1 || moe.topk_groups > moe.groups)
      fail("{}{} = {} must be between 1 and {} = {}", at, key("moe_router_topk_groups"),
           moe.topk_groups, key("moe_router_groups"), moe.groups);
    if (moe.top_k > moe.topk_groups * (moe.experts / moe.groups))
      fail("{}{} = {} exceeds the {} experts of the {} = {} kept groups of {}", at,
           key("moe_top_k"), moe.top_k, moe.topk_groups * (moe.experts / moe.groups),
           key("moe_router_topk_groups"), moe.topk_groups, moe.experts / moe.groups);
    if (!(moe.routed_scaling > 0))
      fail("{}{} = {} must be positive (1: the gates as they are; DeepSeek-V3: 2.5)", at,
           key("moe_routed_scaling_factor"), moe.routed_scaling);
    if (!(moe.bias_update_rate >= 0))
      fail("{}{} = {} must not be negative (0: no balancing bias; DeepSeek-V3: 1e-3)", at,
           key("moe_router_bias_update_rate"), moe.bias_update_rate);
    if (moe.shared_hidden > 0 && moe.shared_experts == 0)
      fail("{}{} = {} needs {} >= 1", at, key("moe_shared_hidden"), moe.shared_hidden,
           key("moe_shared_experts"));
    // Which blocks are MoE blocks (MoeConfig::moe_block).
    if (moe.layer_freq < 1)
      fail("{}{} = {} must be at least 1 (1: every block from {} on is a MoE block)", at,
           key("moe_layer_freq"), moe.layer_freq, key("moe_first_dense_layers"));
    if (moe.first_dense < 0 || moe.first_dense >= c.n_layer)
      fail("{}{} = {} must be between 0 and {} - 1 = {}: at least one block must be a MoE block",
           at, key("moe_first_dense_layers"), moe.first_dense, key("n_layer"), c.n_layer - 1);
    for (std::int64_t i : moe.dense_layers)
      if (i < 0 || i >= c.n_layer)
        fail("{}{} = [{}] names block {}, which {} = {} does not have", at,
             key("moe_dense_layers"), fmt::join(moe.dense_layers, ", "), i, key("n_layer"),
             c.n_layer);
    if (c.moe_blocks() == 0)
      fail("{}{}{} = {} and {} = [{}] leave no MoE block among the {} blocks", at,
           moe.first_dense == 0
               ? ""
               : fmt::format("{} = {}, ", key("moe_first_dense_layers"), moe.first_dense),
           key("moe_layer_freq"), moe.layer_freq, key("moe_dense_layers"),
           fmt::join(moe.dense_layers, ", "), c.n_layer);
  } else if (moe.first_dense != 0 || moe.layer_freq != 1 || !moe.dense_layers.empty()) {
    fail("{}{} = {}, {} = {} and {} = [{}] choose which blocks are MoE blocks: they need {} > 0",
         at, key("moe_first_dense_layers"), moe.first_dense, key("moe_layer_freq"),
         moe.layer_freq, key("moe_dense_layers"), fmt::join(moe.dense_layers, ", "),
         key("moe_experts"));
  }
  if (!(c.init_std > 0)) fail("{}{} = {} must be positive", at, key("init_std"), c.init_std);
}

namespace {

ModelConfig gpt(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                std::int64_t seq) {
  ModelConfig c;
  c.name = name;
  c.n_layer = layers;
  c.d_model = d;
  c.n_head = heads;
  c.d_ff = 4 * d;
  c.seq_len = seq;
  return c;
}

// Llama: vocabulary 32000 (its SentencePiece tokenizer), RMSNorm eps 1e-6 (Llama 1) or 1e-5
// (Llama 2). The 7B/13B/65B shapes are Touvron et al. 2023's.
ModelConfig llama(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                  std::int64_t kv_heads, std::int64_t ffn, std::int64_t vocab, std::int64_t seq) {
  ModelConfig c = gpt(name, layers, d, heads, seq);
  c.family = Family::llama;
  c.n_kv_head = kv_heads;
  c.d_ff = ffn;
  c.vocab_size = vocab;
  c.norm_eps = 1e-5;
  return c;
}

// Llama 3 and 3.1 (Meta's config.json): vocabulary 128256, RoPE base 500000 with Llama 3.1's
// scaling (factor 8 over the 8192 positions it was pre-trained at). seq_len is that 8192, the
// context a continued pre-training would use; the model reads 131072 positions.
ModelConfig llama31(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                    std::int64_t ffn) {
  ModelConfig c = llama(name, layers, d, heads, 8, ffn, 128256, 8192);
  c.rope_theta = 500000;
  c.rope_scaling = RopeScaling::llama3;
  c.rope_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_context = 8192;
  return c;
}

// Qwen2.5 (Qwen's config.json): Llama's block with qkv biases, vocabulary 152064, RoPE base 1e6,
// RMSNorm eps 1e-6, 32768 positions.
ModelConfig qwen25(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                   std::int64_t kv_heads, std::int64_t ffn) {
  ModelConfig c = llama(name, layers, d, heads, kv_heads, ffn, 152064, 32768);
  c.family = Family::qwen2;
  c.rope_theta = 1e6;
  c.norm_eps = 1e-6;
  return c;
}

// Qwen3 (Qwen's config.json): Llama's block with q_norm and k_norm, a head size of its own,
// vocabulary 151936, RoPE base 1e6, RMSNorm eps 1e-6, 40960 positions, untied.
ModelConfig qwen3(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                  std::int64_t kv_heads, std::int64_t head_dim, std::int64_t ffn) {
  ModelConfig c = llama(name, layers, d, heads, kv_heads, ffn, 151936, 40960);
  c.family = Family::qwen3;
  c.head_size = head_dim;
  c.rope_theta = 1e6;
  c.norm_eps = 1e-6;
  c.tie_embeddings = TiedHead::untied;
  return c;
}

// Mistral 7B v0.1 (Jiang et al. 2023, its config.json): Llama's block with 8 kv heads, a
// sliding window of 4096, vocabulary 32000, trained at 8192 tokens.
ModelConfig mistral7b() {
  ModelConfig c = llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 8192);
  c.family = Family::mistral;
  c.sliding_window = 4096;
  return c;
}

// Mixtral 8x7B (Jiang et al. 2024, its config.json): Mistral's block without a window, RoPE
// base 1e6, 32768 positions; 8 SwiGLU experts of 14336 per block, each token to the top 2,
// gates renormalised. 46.7B parameters, 12.9B active.
ModelConfig mixtral8x7b() {
  ModelConfig c = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768);
  c.family = Family::mistral;
  c.rope_theta = 1e6;
  c.moe = {.experts = 8, .top_k = 2};
  return c;
}

// Qwen3-30B-A3B (its config.json): Qwen3's block (heads of 128) with 128 experts of 768 per
// block, each token to the top 8, gates renormalised (norm_topk_prob), no shared expert;
// intermediate_size 6144 is the dense width it has no layer of. 30.5B parameters, 3.3B active.
ModelConfig qwen3_30b_a3b() {
  ModelConfig c = qwen3("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144);
  c.moe = {.experts = 128, .top_k = 8, .expert_hidden = 768};
  return c;
}

// A tiny model of a family for the tests: llama-tiny's shape with the family's own pieces.
ModelConfig tiny(const char* name, Family family, auto&& adjust) {
  ModelConfig c = llama(name, 4, 128, 4, 2, 352, 32000, 128);
  c.family = family;
  adjust(c);
  return c;
}

// BLOOM: vocabulary 250880, MLP 4d (Le Scao et al. 2022).
ModelConfig bloom(const char* name, std::int64_t layers, std::int64_t d, std::int64_t heads,
                  std::int64_t vocab, std::int64_t seq) {
  ModelConfig c = gpt(name, layers, d, heads, seq);
  c.family = Family::bloom;
  c.vocab_size = vocab;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    for (const ModelConfig& c : {
             gpt("gpt-tiny", 4, 128, 4, 128),
             gpt("gpt2", 12, 768, 12, 1024),          // 124M
             gpt("gpt2-medium", 24, 1024, 16, 1024),  // 350M
             gpt("gpt2-large", 36, 1280, 20, 1024),   // 774M
             gpt("gpt2-xl", 48, 1600, 25, 1024),      // 1.5B
             // The Frontier study's sizes. Its 1.4B row lists hidden 2114 with 24 heads, which
             // does not divide; 2112 = 24 x 88 keeps the parameter count (1.4B).
             gpt("gpt-1.4b", 24, 2112, 24, 2048),
             gpt("gpt-22b", 48, 6144, 48, 2048),
             gpt("gpt-175b", 96, 12288, 96, 2048),
             gpt("gpt-1t", 128, 25600, 128, 2048),
             // AxoNN's "80B" GPT (Singh et al., arXiv 2305.13525 and 2502.08145), the shape in
             // its authors' model table (github.com/axonn-ai/Megatron-AxoNN): 42 layers of
             // 12288 with 96 heads, 76.7B parameters with GPT-2's vocabulary.
             gpt("gpt-80b", 42, 12288, 96, 2048),
             // Megatron-Turing NLG's shape, Korthikanti et al.'s 530B row.
             gpt("gpt-530b", 105, 20480, 128, 2048),
             // The tiny versions use GPT-2's vocabulary: they train on the Brown corpus.
             llama("llama-tiny", 4, 128, 4, 2, 352, 32000, 128),
             // GPU benchmark sizes beside GPT-2's (bench/gpu_check.sh): GPT-2 124M's shape as a
             // Llama (grouped-query attention, 3 query heads per kv head; SwiGLU of 2048 keeps
             // the MLP's 3 x 768 x 2048 near GPT-2's 2 x 768 x 3072), and TinyLlama 1.1B's shape
             // (Zhang et al. 2024).
             llama("llama-125m", 12, 768, 12, 4, 2048, 32000, 1024),
             llama("llama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048),
             llama("llama-7b", 32, 4096, 32, 32, 11008, 32000, 2048),
             llama("llama-13b", 40, 5120, 40, 40, 13824, 32000, 2048),
             llama("llama-65b", 80, 8192, 64, 64, 22016, 32000, 2048),
             // Llama 2 7B at its 4096 context (Touvron et al. 2023b).
             llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
             llama31("llama-3.1-8b", 32, 4096, 32, 14336),
             llama31("llama-3.1-70b", 80, 8192, 64, 28672),
             qwen25("qwen2.5-7b", 28, 3584, 28, 4, 18944),
             mistral7b(),
             qwen3("qwen3-8b", 36, 4096, 32, 8, 128, 12288),
             // Mixtures of experts (docs/moe.md), for the planner.
             mixtral8x7b(),
             qwen3_30b_a3b(),
             // The tiny versions of the newer pieces: Llama 3.1's RoPE scaling (over a short
             // original context, so that the test lengths reach the scaled wavelengths) with a
             // head size apart from d_model / n_head; Qwen2's qkv biases with a tied head
             // (as Qwen2.5-0.5B ships).
             tiny("llama3-tiny", Family::llama,
                  [](ModelConfig& c) {
                    c.head_size = 48;
                    c.rope_theta = 500000;
                    c.rope_scaling = RopeScaling::llama3;
                    c.rope_factor = 8;
                    c.rope_original_context = 32;
                  }),
             tiny("qwen2-tiny", Family::qwen2,
                  [](ModelConfig& c) {
                    c.rope_theta = 1e6;
                    c.norm_eps = 1e-6;
                    c.tie_embeddings = TiedHead::tied;
                  }),
             // Qwen3's q_norm and k_norm, with a head size apart from d_model / n_head as
             // Qwen3 sets it.
             tiny("qwen3-tiny", Family::qwen3,
                  [](ModelConfig& c) {
                    c.head_size = 48;
                    c.rope_theta = 1e6;
                    c.norm_eps = 1e-6;
                  }),
             bloom("bloom-tiny", 4, 128, 4, 50257, 128),
             // BLOOM-560M and BLOOM-1b7's shapes (BigScience 2022), for GPU benchmarks.
             bloom("bloom-560m", 24, 1024, 16, 250880, 2048),
             bloom("bloom-1b7", 24, 2048, 16, 250880, 2048),
             bloom("bloom-13b", 40, 5120, 32, 250880, 2048),
         })
      t.emplace(c.name, c);
    return t;
  }();
  return table;
}

}  // namespace

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end())
    fail("unknown model preset \"{}\": choose one of {}", name,
         fmt::join(model_preset_names(), ", "));
  return it->second;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

}  // namespace kintsugi
