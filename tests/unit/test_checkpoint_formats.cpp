// The pieces of training checkpoints that need no model: the safetensors format, the Hugging
// Face GPT-2 layout (q | k | v regrouping, Conv1D transposes), tensor-parallel slice
// addressing, and the checkpoint directory (latest pointer, partial saves, keeping the last k).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/hf_config.hpp"
#include "kintsugi/checkpoint/hf_layout.hpp"
#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/checkpoint/slice_map.hpp"
#include "kintsugi/core/error.hpp"
#include "support/error_of.hpp"
#include "scratch_dir.hpp"
#include "support/error_of.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

using testing::error_of;

TEST(Safetensors, RoundTripAndLayout) {
  const ScratchDir scratch("safetensors");
  const fs::path& dir = scratch.path();
  std::map<std::string, NamedTensor> tensors = {{"b", {{2, 3}, {1, 2, 3, 4, 5, 6}}},
                                                {"a", {{1}, {-7.5f}}}};
  write_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});
  const auto back = read_safetensors(dir / "x.safetensors");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at("b").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.at("b").values, tensors.at("b").values);
  EXPECT_EQ(back.at("a").values, tensors.at("a").values);
  // The header length is little-endian and the data starts 8-byte aligned.
  std::ifstream in(dir / "x.safetensors", std::ios::binary);
  unsigned char prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  std::uint64_t n = 0;
  for (int k = 0; k < 8; ++k) n |= std::uint64_t(prefix[k]) << (8 * k);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(fs::file_size(dir / "x.safetensors"), 8 + n + 7 * sizeof(float));
}

TEST(Safetensors, TruncatedOrForeignFilesAreRefused) {
  const ScratchDir scratch("safetensors-bad");
  const fs::path& dir = scratch.path();
  write_safetensors(dir / "x.safetensors", {{"w", {{4}, {1, 2, 3, 4}}}});
  fs::resize_file(dir / "x.safetensors", fs::file_size(dir / "x.safetensors") - 4);
  EXPECT_NE(error_of([&] { read_safetensors(dir / "x.safetensors"); }).find("truncated"),
            std::string::npos);
  std::ofstream(dir / "y.safetensors") << "not a safetensors file at all";
  EXPECT_NE(error_of([&] { read_safetensors(dir / "y.safetensors"); }).find("not a safetensors"),
            std::string::npos);
}

// A header whose shape multiplies past 64 bits, or whose byte size does (2^62 F32 elements
// wrap to 0 bytes, which the offsets [0, 0] would match): refused by name, with no arithmetic
// that overflows (the unit tests run under UndefinedBehaviorSanitizer with KINTSUGI_SANITIZE).
TEST(Safetensors, ShapesPastSixtyFourBitsAreRefused) {
  const ScratchDir scratch("safetensors-huge");
  const fs::path& dir = scratch.path();
  auto write = [&](const std::string& file, const std::string& header) {
    std::ofstream out(dir / file, std::ios::binary);
    const std::uint64_t n = header.size();
    for (int k = 0; k < 8; ++k) out.put(static_cast<char>(n >> (8 * k)));
    out << header;
  };
  write("elements.safetensors",
        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})");
  EXPECT_NE(error_of([&] { read_safetensors(dir / "elements.safetensors"); })
                .find("the shape of tensor w has more elements than 64 bits can count"),
            std::string::npos);
  write("bytes.safetensors",
        R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})");
  EXPECT_NE(error_of([&] { read_safetensors(dir / "bytes.safetensors"); })
                .find("tensor w has more bytes than 64 bits can count"),
            std::string::npos);
}

TEST(Safetensors, HalfPrecisionDataIsWidened) {
  // A file written by hand as other tools write them: F16 and BF16 tensors, no padding.
  const ScratchDir scratch("safetensors-half");
  const fs::path& dir = scratch.path();
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})";
  std::ofstream out(dir / "half.safetensors", std::ios::binary);
  const std::uint64_t n = header.size();
  for (int k = 0; k < 8; ++k) out.put(static_cast<char>(n >> (8 * k)));
  out << header;
  const unsigned char data[] = {0x00, 0x3c, 0x00, 0xc0,  // f16 1.0, -2.0
                                0x40, 0x40};             // bf16 3.0
  out.write(reinterpret_cast<const char*>(data), sizeof(data));
  out.close();
  const auto t = read_safetensors(dir / "half.safetensors");
  EXPECT_EQ(t.at("h").values, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(t.at("b").values, (std::vector<float>{3.0f}));
}

ModelConfig gpt(std::int64_t heads) {
  ModelConfig c = model_preset("gpt-tiny");
  c.n_layer = 1;
  c.d_model = 4 * heads;
  c.n_head = heads;
  c.d_ff = 4 * c.d_model;
  return c;
}

TEST(HfLayout, Gpt2FusedQkvIsRegroupedAndTransposed) {
  const ModelConfig c = gpt(2);  // head_dim 4
  const auto table = hf_tensors(c);
  const auto it = std::find_if(table.begin(), table.end(),
                               [](const HfTensor& t) { return t.ours == "blocks.0.attn.qkv.weight"; });
  ASSERT_NE(it, table.end());
  EXPECT_EQ(it->theirs, "transformer.h.0.attn.c_attn.weight");
  // Ours: [3d, d] rows per head (q0 k0 v0 q1 k1 v1), value = row index.
  const std::int64_t d = c.d_model, hd = c.head_dim();
  NamedTensor ours{{3 * d, d}, std::vector<float>(3 * d * d)};
  for (std::int64_t r = 0; r < 3 * d; ++r)
    for (std::int64_t i = 0; i < d; ++i) ours.values[r * d + i] = static_cast<float>(r);
  const NamedTensor theirs = to_hf(*it, c, ours);
  ASSERT_EQ(theirs.shape, (std::vector<std::int64_t>{d, 3 * d}));
  // Theirs: [in, out], out = (q | k | v) x (head, j). Column of head 1's key, element 2:
  const std::int64_t column = 1 * d + 1 * hd + 2;        // k, head 1, j 2
  const std::int64_t our_row = 1 * 3 * hd + 1 * hd + 2;  // head 1: q, k, v blocks
  for (std::int64_t i = 0; i < d; ++i) EXPECT_EQ(theirs.values[i * 3 * d + column], our_row);
  const NamedTensor back = from_hf(*it, c, theirs);
  EXPECT_EQ(back.shape, ours.shape);
  EXPECT_EQ(back.values, ours.values);
}

TEST(HfLayout, NamesCoverTheModelAndPrefixesAreOptional) {
  const auto table = hf_tensors(gpt(2));
  EXPECT_EQ(table.size(), 2u + 12u + 2u);  // embeddings, one block, final norm
  EXPECT_EQ(hf_base_name("transformer.h.0.ln_1.weight"), "h.0.ln_1.weight");
  EXPECT_EQ(hf_base_name("h.0.ln_1.weight"), "h.0.ln_1.weight");
  // Llama: q, k and v projections are three tensors of one fused qkv; an untied head.
  const ModelConfig llama = model_preset("llama-tiny");
  EXPECT_EQ(hf_tensors(llama).size(), 1u + 9u * llama.n_layer + 2u);
  EXPECT_EQ(hf_base_name("model.layers.0.self_attn.q_proj.weight"), "layers.0.self_attn.q_proj.weight");
  // Qwen3: Llama's and q_norm and k_norm, a weight of head_dim each (48 in a model of 128).
  const ModelConfig qwen3 = model_preset("qwen3-tiny");
  const auto qwen3_table = hf_tensors(qwen3);
  EXPECT_EQ(qwen3_table.size(), 1u + 11u * qwen3.n_layer + 2u);
  for (const char* norm : {"q_norm", "k_norm"}) {
    const std::string ours = fmt::format("blocks.3.attn.{}.weight", norm);
    const auto it = std::find_if(qwen3_table.begin(), qwen3_table.end(),
                                 [&](const HfTensor& t) { return t.ours == ours; });
    ASSERT_NE(it, qwen3_table.end()) << ours;
    EXPECT_EQ(it->theirs, fmt::format("model.layers.3.self_attn.{}.weight", norm));
    EXPECT_EQ(it->conversion, HfConversion::none);
    EXPECT_EQ(our_shape(ours, qwen3), (std::vector<std::int64_t>{48})) << ours;
    EXPECT_EQ(hf_shape(it->conversion, qwen3, our_shape(ours, qwen3)),
              (std::vector<std::int64_t>{48}));
  }
  // BLOOM: transformers fixes the MLP at 4 x hidden.
  ModelConfig bloom = model_preset("bloom-tiny");
  EXPECT_EQ(hf_tensors(bloom).size(), 3u + 12u * bloom.n_layer + 2u);
  bloom.d_ff = 3 * bloom.d_model;
  EXPECT_NE(error_of([&] { hf_tensors(bloom); }).find("MLP of 4 x hidden"), std::string::npos);
}

// A folder's own count of blocks, from its tensor names (checked against config.json before
// anything is built per block: train/hf_init.cpp).
TEST(HfLayout, BlockCountFromTensorNames) {
  std::vector<std::string> names;
  for (const auto& family : {"gpt-tiny", "llama-tiny", "bloom-tiny"}) {
    names.clear();
    for (const HfTensor& t : hf_tensors(model_preset(family))) names.push_back(t.theirs);
    EXPECT_EQ(hf_block_count(names), 4) << family;
  }
  EXPECT_EQ(hf_block_count({"h.11.ln_1.weight", "wte.weight", "h.2.attn.c_attn.bias"}), 12);
  EXPECT_EQ(hf_block_count({"wte.weight", "h.x.ln_1.weight", "h.3", "layers.99999999999999999999.a"}),
            0);
  EXPECT_EQ(hf_block_count({}), 0);
}

// A rank reads its slice element by element (hf_weights.cpp): hf_element must put every element
// of ours where the whole-tensor conversion to_hf puts it, for every tensor of every family
// (GPT-2's transposed, regrouped qkv; Llama's q, k, v parts with grouped-query attention).
TEST(HfLayout, ElementByElementMatchesWholeTensorConversion) {
  ModelConfig llama = model_preset("llama-tiny");
  llama.n_layer = 1;
  llama.n_head = 4;
  llama.n_kv_head = 2;
  llama.d_model = 32;
  llama.d_ff = 48;
  llama.vocab_size = 37;
  ModelConfig bloom = model_preset("bloom-tiny");
  bloom.n_layer = 1;
  bloom.vocab_size = 37;
  ModelConfig g = gpt(4);
  g.vocab_size = 37;
  g.seq_len = 8;
  ModelConfig qwen3 = llama;  // q_norm and k_norm; heads of 12 apart from 32 / 4
  qwen3.family = Family::qwen3;
  qwen3.head_size = 12;
  for (const ModelConfig& c : {g, llama, bloom, qwen3}) {
    std::map<std::string, std::vector<const HfTensor*>> parts;
    const auto table = hf_tensors(c);
    for (const HfTensor& t : table) parts[t.ours].push_back(&t);
    for (const auto& [ours_name, hf] : parts) {
      const std::vector<std::int64_t> shape = our_shape(ours_name, c);
      const std::int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
      NamedTensor ours{shape, std::vector<float>(rows * cols)};
      for (std::size_t k = 0; k < ours.values.size(); ++k) ours.values[k] = static_cast<float>(k);
      std::vector<NamedTensor> theirs;
      for (const HfTensor* t : hf) {
        theirs.push_back(to_hf(*t, c, ours));
        EXPECT_EQ(theirs.back().shape, hf_shape(t->conversion, c, shape)) << t->theirs;
      }
      for (std::int64_t k = 0; k < rows * cols; ++k) {
        const HfElement at = hf_element(hf[0]->conversion, c, rows, cols, k);
        ASSERT_LT(at.part, static_cast<int>(theirs.size())) << ours_name;
        ASSERT_LT(at.index, static_cast<std::int64_t>(theirs[at.part].values.size()));
        ASSERT_EQ(theirs[at.part].values[at.index], static_cast<float>(k))
            << ours_name << " element " << k;
      }
    }
  }
}

// The config.json the exporter writes reads back to the same model, for every family.
TEST(HfConfig, ExportedConfigReadsBack) {
  ModelConfig llama = model_preset("llama-tiny");
  llama.n_kv_head = 2;
  llama.rope_theta = 500000;
  ModelConfig mistral = llama;
  mistral.family = Family::mistral;
  mistral.sliding_window = 64;
  ModelConfig yarn = model_preset("qwen2-tiny");
  yarn.rope_scaling = RopeScaling::yarn;
  yarn.rope_factor = 4;
  yarn.rope_original_context = 32;
  yarn.rope_beta_fast = 16;
  yarn.rope_attention_factor = 1.25;
  ModelConfig qwen3_usual_heads = model_preset("qwen3-tiny");  // heads of 128 / 4
  qwen3_usual_heads.head_size = 0;
  for (const ModelConfig& c : {model_preset("gpt-tiny"), llama, model_preset("bloom-tiny"),
                               model_preset("llama3-tiny"), model_preset("qwen2-tiny"), mistral,
                               yarn, model_preset("qwen3-tiny"), qwen3_usual_heads}) {
    const HfModel h = model_from_hf_config(hf_config(c), "config.json");
    EXPECT_EQ(h.model.family, c.family);
    EXPECT_EQ(h.model.n_layer, c.n_layer);
    EXPECT_EQ(h.model.d_model, c.d_model);
    EXPECT_EQ(h.model.n_head, c.n_head);
    EXPECT_EQ(h.model.kv_heads(), c.kv_heads());
    EXPECT_EQ(h.model.d_ff, c.d_ff);
    EXPECT_EQ(h.model.vocab_size, c.vocab_size);
    EXPECT_EQ(h.model.norm_eps, c.norm_eps);
    if (c.is_llama()) {
      EXPECT_EQ(h.model.rope_theta, c.rope_theta);
      EXPECT_EQ(h.model.head_dim(), c.head_dim());
      EXPECT_EQ(h.model.sliding_window, c.sliding_window);
      EXPECT_EQ(h.model.rope_scaling, c.rope_scaling);
      if (c.rope_scaling != RopeScaling::none) {
        EXPECT_EQ(h.model.rope_factor, c.rope_factor);
        EXPECT_EQ(h.model.rope_original_context, c.rope_original_context);
      }
      if (c.rope_scaling == RopeScaling::llama3) {
        EXPECT_EQ(h.model.rope_low_freq_factor, c.rope_low_freq_factor);
        EXPECT_EQ(h.model.rope_high_freq_factor, c.rope_high_freq_factor);
      }
      if (c.rope_scaling == RopeScaling::yarn) {
        EXPECT_EQ(h.model.rope_beta_fast, c.rope_beta_fast);
        EXPECT_EQ(h.model.rope_beta_slow, c.rope_beta_slow);
        EXPECT_EQ(h.model.rope_attention_factor, c.rope_attention_factor);
      }
    }
    EXPECT_EQ(h.model.tied_embeddings(), c.tied_embeddings());
    EXPECT_EQ(h.model.qkv_bias(), c.qkv_bias());
    EXPECT_EQ(h.model.qk_norm(), c.qk_norm());
    if (!c.is_bloom()) {
      EXPECT_EQ(h.model.seq_len, c.seq_len);
    }
    EXPECT_FALSE(h.head_from_embedding);
  }
  // A window that the family's Hugging Face model would not apply is not exported as if it
  // were not there.
  for (const char* preset : {"llama-tiny", "qwen2-tiny"}) {
    ModelConfig windowed = model_preset(preset);
    windowed.sliding_window = 8;
    EXPECT_NE(error_of([&] { hf_config(windowed); })
                  .find("model.sliding_window = 8 has no Hugging Face config.json"),
              std::string::npos)
        << preset;
  }
  // What would change the arithmetic is refused, naming the field.
  auto refused = [](nlohmann::json j, const std::string& field) {
    return error_of([&] { model_from_hf_config(j, "config.json"); }).find(field) !=
           std::string::npos;
  };
  // RoPE scaling is read by type; a type, or a parameter of it, that we do not compute is
  // refused by name.
  nlohmann::json j = hf_config(llama);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_TRUE(refused(j, "rope_scaling of rope type \"llama3\" has no original_max_position"));
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_TRUE(refused(j, "rope_scaling.type = \"dynamic\" is not supported"));
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 0.7}};
  EXPECT_TRUE(refused(j, "rope_scaling.mscale = 0.7 is not supported for rope type \"yarn\""));
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"beta_fast", 8}};
  EXPECT_TRUE(refused(j, "rope_scaling.beta_fast"));
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", false}};
  EXPECT_TRUE(refused(j, "rope_scaling.truncate = false"));
  // Qwen's documented form: the legacy "type" key, the context taken from the file.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  j["max_position_embeddings"] = 96;
  const ModelConfig qwen_yarn = model_from_hf_config(j, "config.json").model;
  EXPECT_EQ(qwen_yarn.rope_scaling, RopeScaling::yarn);
  EXPECT_EQ(qwen_yarn.rope_original_context, 96);
  // transformers 5 writes RoPE's parameters as one object, theta and scaling together.
  j = hf_config(llama);
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123.0}};
  EXPECT_EQ(model_from_hf_config(j, "config.json").model.rope_theta, 123.0);
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 123.0}, {"factor", 2.0}};
  EXPECT_EQ(model_from_hf_config(j, "config.json").model.rope_factor, 2.0);
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 123.0}};
  EXPECT_TRUE(refused(j, "rope_parameters.rope_type = \"longrope\""));
  // Qwen2's per-layer window and a family's other attention layouts are refused by name.
  j = hf_config(model_preset("qwen2-tiny"));
  j["use_sliding_window"] = true;
  EXPECT_TRUE(refused(j, "use_sliding_window = true is not supported"));
  j = hf_config(model_preset("qwen2-tiny"));
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  EXPECT_TRUE(refused(j, "layer_types"));
  j["layer_types"] = {"full_attention", "full_attention", "full_attention", "full_attention"};
  EXPECT_FALSE(refused(j, "layer_types"));
  // Qwen3Config's head_dim is 128 unless the file says otherwise (not hidden_size / heads):
  // the export writes it always, and a file without it has heads of 128.
  j = hf_config(qwen3_usual_heads);
  EXPECT_EQ(j.at("head_dim"), 32);
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.at("architectures"), nlohmann::json({"Qwen3ForCausalLM"}));
  EXPECT_EQ(j.at("attention_bias"), false);
  EXPECT_EQ(j.at("use_sliding_window"), false);
  j.erase("head_dim");
  EXPECT_EQ(model_from_hf_config(j, "config.json").model.head_dim(), 128);
  j["hidden_size"] = 512;  // 4 heads of 128: the usual size, no head size apart
  EXPECT_EQ(model_from_hf_config(j, "config.json").model.head_size, 0);
  // Qwen3's attention has no biases, and its windowed layers are refused as Qwen2's.
  j = hf_config(model_preset("qwen3-tiny"));
  j["attention_bias"] = true;
  EXPECT_TRUE(refused(j, "attention_bias = true is not supported"));
  j = hf_config(model_preset("qwen3-tiny"));
  j["use_sliding_window"] = true;
  EXPECT_TRUE(refused(j, "use_sliding_window = true is not supported"));
  j = hf_config(llama);
  j["num_key_value_heads"] = 3;
  EXPECT_TRUE(refused(j, "num_key_value_heads = 3 does not divide"));
  j = hf_config(model_preset("gpt-tiny"));
  j["activation_function"] = "relu";
  EXPECT_TRUE(refused(j, "activation_function"));
  j = hf_config(model_preset("gpt-tiny"));
  j["n_head"] = 2.5;
  EXPECT_TRUE(refused(j, "n_head = 2.5 is not a positive integer"));
}

// Mixtures of experts go out as Mixtral (llama, mistral), Qwen2-MoE (qwen2, with its shared
// expert) or Qwen3-MoE (qwen3) and read back to the same experts; what those classes cannot
// hold is refused by name. Qwen's dense layers (decoder_sparse_step, mlp_only_layers) are
// model.moe_layer_freq and model.moe_dense_layers (docs/moe.md, "Dense blocks").
TEST(HfConfig, MixturesOfExpertsReadBack) {
  ModelConfig mixtral = model_preset("llama-tiny");
  mixtral.family = Family::mistral;
  mixtral.moe = {.experts = 8, .top_k = 2, .expert_hidden = 88};
  ModelConfig qwen2 = model_preset("qwen2-tiny");
  qwen2.moe = {.experts = 6, .top_k = 4, .expert_hidden = 16, .shared_experts = 1,
               .shared_hidden = 64, .renormalize = false};
  ModelConfig qwen3 = model_preset("qwen3-tiny");
  qwen3.moe = {.experts = 8, .top_k = 3, .expert_hidden = 24};
  for (const ModelConfig& c : {mixtral, qwen2, qwen3}) {
    const nlohmann::json j = hf_config(c);
    const HfModel h = model_from_hf_config(j, "config.json");
    EXPECT_EQ(h.model.family, c.family) << j.dump();
    EXPECT_EQ(h.model.moe.experts, c.moe.experts);
    EXPECT_EQ(h.model.moe.top_k, c.moe.top_k);
    EXPECT_EQ(h.model.expert_hidden(), c.expert_hidden());
    EXPECT_EQ(h.model.shared_hidden(), c.shared_hidden());
    EXPECT_EQ(h.model.moe.renormalize, c.moe.renormalize);
    EXPECT_EQ(h.model.qkv_bias(), c.qkv_bias());
    EXPECT_EQ(h.model.qk_norm(), c.qk_norm());
    // Every tensor has a name of theirs, the router and each expert's three among them.
    const std::vector<HfTensor> names = hf_tensors(c);
    const auto has = [&](const std::string& theirs) {
      return std::any_of(names.begin(), names.end(),
                         [&](const HfTensor& t) { return t.theirs == theirs; });
    };
    if (c.family == Family::mistral) {
      EXPECT_EQ(j.at("model_type"), "mixtral");
      EXPECT_EQ(j.at("intermediate_size"), 88);  // Mixtral's experts' width
      EXPECT_TRUE(has("model.layers.1.block_sparse_moe.experts.7.w2.weight"));
    } else {
      EXPECT_EQ(j.at("model_type"), c.family == Family::qwen2 ? "qwen2_moe" : "qwen3_moe");
      EXPECT_TRUE(has("model.layers.1.mlp.experts.5.down_proj.weight"));
      EXPECT_EQ(has("model.layers.0.mlp.shared_expert_gate.weight"), c.shared_hidden() > 0);
    }
  }
  // A Llama-family model with experts goes out as Mixtral too (Mistral's attention without a
  // window is Llama's) and comes back as family mistral.
  ModelConfig llama = mixtral;
  llama.family = Family::llama;
  EXPECT_EQ(model_from_hf_config(hf_config(llama), "config.json").model.family, Family::mistral);
  // What the classes cannot hold.
  auto export_error = [](ModelConfig c) { return error_of([&] { hf_config(c); }); };
  ModelConfig shared_mixtral = mixtral;
  shared_mixtral.moe.shared_experts = 1;
  EXPECT_NE(export_error(shared_mixtral).find("Mixtral has no shared expert"), std::string::npos);
  ModelConfig unnormalised = mixtral;
  unnormalised.moe.renormalize = false;
  EXPECT_NE(export_error(unnormalised).find("Mixtral always renormalises"), std::string::npos);
  ModelConfig qwen2_unshared = qwen2;
  qwen2_unshared.moe.shared_experts = qwen2_unshared.moe.shared_hidden = 0;
  EXPECT_NE(export_error(qwen2_unshared).find("Qwen2-MoE, whose blocks have a shared expert"),
            std::string::npos);
  ModelConfig qwen3_shared = qwen3;
  qwen3_shared.moe.shared_experts = 1;
  EXPECT_NE(export_error(qwen3_shared).find("Qwen3-MoE has no shared expert"), std::string::npos);
  // Their fields that ours cannot follow, by name.
  auto refused = [](nlohmann::json j, const std::string& field) {
    const std::string e = error_of([&] { model_from_hf_config(j, "config.json"); });
    EXPECT_NE(e.find(field), std::string::npos) << e;
  };
  nlohmann::json j = hf_config(qwen3);
  j["decoder_sparse_step"] = 0;
  refused(j, "decoder_sparse_step = 0 is not a positive integer");
  j = hf_config(qwen3);
  j["mlp_only_layers"] = "0";
  refused(j, "mlp_only_layers = \"0\" is not a list of layer numbers");
  j = hf_config(qwen3);
  j["mlp_only_layers"] = {0, 9};
  refused(j, "mlp_only_layers = [0, 9] names block 9, which num_hidden_layers");
  j = hf_config(qwen3);
  j["mlp_only_layers"] = {0, 1, 2, 3};
  refused(j, "leave no MoE block");
  j = hf_config(mixtral);
  j["router_jitter_noise"] = 0.1;
  refused(j, "router_jitter_noise = 0.1 is not supported");
  j = hf_config(mixtral);
  j["num_experts_per_tok"] = 9;  // more than its 8 experts: named as their fields
  refused(j, "num_experts_per_tok = 9 must be between 1 and num_local_experts = 8");
  j = hf_config(qwen3);
  j["shared_expert_intermediate_size"] = 64;  // Qwen3-MoE has no shared expert
  refused(j, "field shared_expert_intermediate_size is not one kintsugi knows for a Qwen3-MoE");
  j = hf_config(qwen2);
  j["num_experts_per_tok"] = 7;
  refused(j, "num_experts_per_tok = 7 must be between 1 and num_experts = 6");
  // Dense layers: Qwen's fields read back as ours, field for field; a pattern whose MoE
  // blocks are off the step goes out as step 1 with every dense block listed.
  ModelConfig dense = qwen3;
  dense.n_layer = 4;
  j = hf_config(dense);
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  const ModelConfig stepped = model_from_hf_config(j, "config.json").model;
  EXPECT_EQ(stepped.moe.first_dense, 0);
  EXPECT_EQ(stepped.moe.layer_freq, 2);
  EXPECT_EQ(stepped.moe.dense_layers, std::vector<std::int64_t>{3});
  EXPECT_EQ(hf_config(stepped).at("decoder_sparse_step"), 2);
  EXPECT_EQ(hf_config(stepped).at("mlp_only_layers"), nlohmann::json({3}));
  const std::vector<HfTensor> names = hf_tensors(stepped);
  const auto has = [&](const std::string& theirs) {
    return std::any_of(names.begin(), names.end(),
                       [&](const HfTensor& t) { return t.theirs == theirs; });
  };
  EXPECT_TRUE(has("model.layers.0.mlp.gate_proj.weight"));  // dense: off the step
  EXPECT_TRUE(has("model.layers.1.mlp.experts.0.up_proj.weight"));
  EXPECT_TRUE(has("model.layers.3.mlp.down_proj.weight"));  // dense: mlp_only_layers
  EXPECT_FALSE(has("model.layers.3.mlp.gate.weight"));
  dense.moe.first_dense = 1;  // dense, MoE, MoE, MoE: DeepSeek's first_k_dense_replace 1
  EXPECT_EQ(hf_config(dense).at("decoder_sparse_step"), 1);
  EXPECT_EQ(hf_config(dense).at("mlp_only_layers"), nlohmann::json({0}));
  dense.moe.layer_freq = 2;  // dense, dense, MoE, dense: off Qwen's step 2
  EXPECT_EQ(hf_config(dense).at("decoder_sparse_step"), 1);
  EXPECT_EQ(hf_config(dense).at("mlp_only_layers"), nlohmann::json({0, 1, 3}));
  const ModelConfig back = model_from_hf_config(hf_config(dense), "config.json").model;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.is_moe_block(i), dense.is_moe_block(i)) << i;
  ModelConfig dense_mixtral = mixtral;
  dense_mixtral.moe.first_dense = 1;
  EXPECT_NE(export_error(dense_mixtral).find("every Mixtral block is a mixture of experts"),
            std::string::npos);
  // The router's training coefficient is said, not applied: it is a training setting.
  j = hf_config(mixtral);
  j["router_aux_loss_coef"] = 0.02;
  const HfModel noted = model_from_hf_config(j, "config.json");
  ASSERT_EQ(noted.notes.size(), 1u);
  EXPECT_NE(noted.notes[0].find("train.moe_aux_loss_coeff"), std::string::npos);
}

// A value of config.json that no model can have is refused as the file's field, with the
// truth about it, not as a model.* key the user never set.
TEST(HfConfig, ImpossibleValuesAreRefusedAsTheFilesFields) {
  ModelConfig llama = model_preset("llama-tiny");
  auto error = [](const nlohmann::json& j) {
    return error_of([&] { model_from_hf_config(j, "dir/config.json"); });
  };
  nlohmann::json j = hf_config(llama);
  j["rms_norm_eps"] = 0;
  EXPECT_EQ(error(j), "dir/config.json: rms_norm_eps = 0 must be positive");
  j = hf_config(llama);
  j["rope_theta"] = 0;
  EXPECT_EQ(error(j), "dir/config.json: rope_theta = 0 must be positive");
  j = hf_config(llama);
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", -1.0}};
  EXPECT_NE(error(j).find("dir/config.json: rope_parameters.rope_theta = -1.0 must be"),
            std::string::npos)
      << error(j);
  j = hf_config(llama);  // heads of 120 / 8 = 15: RoPE rotates pairs of dimensions
  j["hidden_size"] = 120;
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 8;
  EXPECT_NE(error(j).find("dir/config.json: hidden_size / num_attention_heads = 15 must be even"),
            std::string::npos)
      << error(j);
  j = hf_config(llama);
  j["initializer_range"] = 0;
  EXPECT_EQ(error(j), "dir/config.json: initializer_range = 0 must be positive");
  const ModelConfig gpt = model_preset("gpt-tiny");
  j = hf_config(gpt);
  j["n_head"] = 3;
  EXPECT_NE(error(j).find("dir/config.json: n_embd = 128 is not divisible by n_head = 3"),
            std::string::npos)
      << error(j);
  j = hf_config(gpt);
  j["layer_norm_epsilon"] = -1;
  EXPECT_EQ(error(j), "dir/config.json: layer_norm_epsilon = -1 must be positive");
  j = hf_config(model_preset("bloom-tiny"));
  j["n_head"] = 3;
  EXPECT_NE(error(j).find("dir/config.json: hidden_size = 128 is not divisible by n_head = 3"),
            std::string::npos)
      << error(j);
}

// A family added to Family before its Hugging Face names is refused by name: the exporter does
// not write it a GPT-2 config.json, and the field names of its messages are not a
// std::out_of_range from a map.
TEST(HfConfig, FamilyWithoutHuggingFaceNamesIsRefused) {
  ModelConfig c = model_preset("gpt-tiny");
  c.family = static_cast<Family>(EnumNames<Family>::values.size());  // past the last one named
  const std::string exported = error_of([&] { hf_config(c); });
  EXPECT_NE(exported.find("model.family"), std::string::npos) << exported;
  EXPECT_NE(exported.find("gpt2, llama, mistral, qwen2, qwen3 and bloom"), std::string::npos)
      << exported;
  HfModel h;
  h.model.family = c.family;
  const std::string named = error_of([&] { h.field_of("model.n_layer"); });
  EXPECT_NE(named.find("model.family"), std::string::npos) << named;
  EXPECT_NE(named.find("gpt2, llama and bloom"), std::string::npos) << named;
  EXPECT_EQ(h.field_of("train.lr"), "train.lr");  // a key with no field of theirs is itself
}

// Headers alone: byte ranges in the file, nothing read.
TEST(Safetensors, HeaderLocatesTensors) {
  const ScratchDir scratch("safetensors-header");
  const fs::path file = scratch.path() / "x.safetensors";
  write_safetensors(file, {{"a", {{2}, {1, 2}}}, {"b", {{3}, {3, 4, 5}}}});
  const auto header = read_safetensors_header(file);
  ASSERT_EQ(header.size(), 2u);
  const SafetensorsEntry& b = header.at("b");
  EXPECT_EQ(b.dtype, "F32");
  EXPECT_EQ(b.end - b.begin, 12u);
  EXPECT_EQ(b.end, fs::file_size(file));  // "b" follows "a": the last bytes of the file
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(b.begin));
  unsigned char raw[12];
  in.read(reinterpret_cast<char*>(raw), 12);
  EXPECT_EQ(safetensors_value(raw, "F32", 2), 5.0f);
}

TEST(SliceMap, ColumnAndRowSlicesAndPaddingRows) {
  // A [6, 4] tensor stored without padding as [5, 4]; rank 1 of 2 holds columns 2-3.
  const SliceMap columns({6, 2}, 1, 2, {5, 4});
  EXPECT_EQ(columns(0), 2);      // row 0, column 2
  EXPECT_EQ(columns(3), 4 + 3);  // row 1, column 3
  EXPECT_EQ(columns(10), -1);    // row 5: padding
  // Rank 1 of 2 holding rows 3-5.
  const SliceMap rows({3, 4}, 0, 3, {5, 4});
  EXPECT_EQ(rows(0), 12);
  EXPECT_EQ(rows(4 + 1), 17);
  EXPECT_EQ(rows(8), -1);
  const SliceMap vector({3}, 0, 3, {6});
  EXPECT_EQ(vector(2), 5);
}

TEST(CheckpointDir, LatestPartialAndKeep) {
  const ScratchDir scratch("ckpt-dir");
  const fs::path& root = scratch.path();
  EXPECT_FALSE(newest_checkpoint(root));
  for (int step : {2, 4, 6}) {
    fs::create_directories(checkpoint_path(root, step));
    std::ofstream(checkpoint_path(root, step) / "manifest.json") << "{}";
  }
  fs::create_directories(partial_path(checkpoint_path(root, 8)));  // a save that died
  EXPECT_EQ(newest_checkpoint(root)->filename(), "step-00000006");
  update_latest(root, checkpoint_path(root, 4));
  EXPECT_EQ(newest_checkpoint(root)->filename(), "step-00000004");  // the pointer decides
  prune_checkpoints(root, 2, checkpoint_path(root, 6));
  EXPECT_FALSE(fs::exists(checkpoint_path(root, 2)));
  EXPECT_TRUE(fs::exists(checkpoint_path(root, 4)));
  EXPECT_FALSE(fs::exists(partial_path(checkpoint_path(root, 8))));
  // A run resumed from an older step saved step 4 while step 6 exists: 4 is kept.
  prune_checkpoints(root, 1, checkpoint_path(root, 4));
  EXPECT_TRUE(fs::exists(checkpoint_path(root, 4)));
  EXPECT_FALSE(fs::exists(checkpoint_path(root, 6)));
  fs::create_directories(checkpoint_path(root, 6));
  std::ofstream(checkpoint_path(root, 6) / "manifest.json") << "{}";
  fs::remove_all(checkpoint_path(root, 4));  // the pointer's target is gone: newest complete
  EXPECT_EQ(newest_checkpoint(root)->filename(), "step-00000006");
  EXPECT_EQ(resolve_resume("auto", root.parent_path() / "nothing-here"), std::nullopt);
  EXPECT_NE(error_of([&] { resolve_resume((root / "nope").string(), root); }).find("no such"),
            std::string::npos);
}

}  // namespace
}  // namespace kintsugi
