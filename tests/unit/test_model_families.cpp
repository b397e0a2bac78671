// GPT-2, Llama and BLOOM as whole models: every layer's backward (embeddings, embedding norm,
// RMSNorm / LayerNorm, qkv with learned positions, RoPE or ALiBi, grouped-query attention,
// SwiGLU / GELU MLP, untied / tied head) against finite differences in float64, parameter
// counts against the formulas (which match Hugging Face's), and recomputation bit-identical to
// keeping activations.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/step_benchmark.hpp"
#include "support/family_variants.hpp"
#include "support/random_tokens.hpp"

namespace kintsugi {
namespace {

// A family or variant (support/family_variants.hpp) at a micro size.
ModelConfig micro(const std::string& param) {
  ModelConfig c = testing::family_variant(param);
  c.name = "micro-" + param;
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 4;  // 4 heads of 2: ALiBi slopes differ per head
  c.n_kv_head = c.is_llama() ? 2 : 0;  // grouped-query: 2 query heads per kv head
  c.d_ff = c.is_llama() ? 12 : 16;
  c.vocab_size = 11;
  c.vocab_pad_multiple = 8;
  c.seq_len = 6;
  c.init_std = 0.3;
  c.rope_theta = 10.0;  // large angles at 6 positions, so the rotation matters
  return c;
}

using testing::random_tokens;

class ModelFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelFamily, FullGradientMatchesFiniteDifferences) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ModelConfig c = micro(GetParam());
  const std::int64_t B = 2, T = 5;
  GptModel model(*backend, c, DType::f64, B, T);
  model.params().initialize(42);
  // Norm weights and biases start at 1 and 0; perturb them so their gradients are generic.
  for (int i = 0; i < model.params().size(); ++i) {
    if (model.params().entry(i).spec.init == ParamInit::normal) continue;
    Tensor w = model.params().param(i);
    for (std::int64_t k = 0; k < w.numel(); ++k) w.as<double>()[k] += 0.1 * normal_at(7, i, k);
  }
  auto tokens = random_tokens(B * T, c.vocab_size, 3);
  auto targets = random_tokens(B * T, c.vocab_size, 4);
  targets[3] = -1;  // an ignored position
  const double scale = 1.0 / (B * T);
  model.params().begin_step();
  model.forward_backward(tokens.data(), targets.data(), scale);
  auto loss = [&] { return scale * model.forward_loss(tokens.data(), targets.data()); };

  ParamStore& p = model.params();
  for (int i = 0; i < p.size(); ++i) {
    Tensor w = p.param(i), g = p.grad(i);
    std::vector<double> analytic(g.as<double>(), g.as<double>() + g.numel());
    const auto& spec = p.entry(i).spec;
    // Padding rows of the embedding and head stay exactly zero in value and gradient.
    std::int64_t n = w.numel();
    if (spec.valid_rows >= 0) {
      const std::int64_t row = n / w.shape[0];
      for (std::int64_t k = spec.valid_rows * row; k < n; ++k) {
        EXPECT_EQ(w.as<double>()[k], 0.0);
        EXPECT_EQ(analytic[k], 0.0);
      }
      n = spec.valid_rows * row;
    }
    testing::expect_gradient(loss, w.as<double>(), n, analytic.data(), spec.name.c_str(), 24,
                             1e-6);
  }
}

TEST_P(ModelFamily, ParametersAreTheFamilysAndMatchTheFormula) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ModelConfig c = micro(GetParam());
  GptModel model(*backend, c, DType::f32, 1, c.seq_len);
  std::int64_t stored = 0;
  bool biases = false, qkv_bias = false, proj_bias = false, positions = false, head = false,
       embedding_norm = false, qk_norm = false;
  for (int i = 0; i < model.params().size(); ++i) {
    const auto& e = model.params().entry(i);
    Shape s = e.spec.global_shape;
    if (e.spec.valid_rows >= 0) s.dims[0] = e.spec.valid_rows;
    stored += s.numel();
    const std::string& name = e.spec.name;
    biases |= name.ends_with(".bias") && !name.ends_with("qkv.bias");
    qkv_bias |= name.ends_with("attn.qkv.bias");
    proj_bias |= name.ends_with("attn.proj.bias");
    positions |= name == "embedding.position.weight";
    head |= name == "head.weight";
    embedding_norm |= name == "embedding.norm.weight";
    if (name.ends_with("attn.q_norm.weight") || name.ends_with("attn.k_norm.weight")) {
      qk_norm = true;
      EXPECT_EQ(s.numel(), c.head_dim()) << name;
    }
  }
  EXPECT_EQ(stored, parameter_count(c));
  EXPECT_EQ(positions, c.learned_positions());
  EXPECT_EQ(biases, c.has_biases());
  EXPECT_EQ(proj_bias, c.has_biases());
  EXPECT_EQ(qkv_bias, c.qkv_bias());  // Qwen2's are on qkv alone
  EXPECT_EQ(head, !c.tied_embeddings());  // Llama's head is untied
  EXPECT_EQ(embedding_norm, c.embedding_norm());
  EXPECT_EQ(qk_norm, c.qk_norm());  // Qwen3's
  const int qkv = model.params().find("blocks.0.attn.qkv.weight");
  ASSERT_GE(qkv, 0);
  EXPECT_EQ(model.params().entry(qkv).spec.global_shape[0],
            (c.n_head + 2 * c.kv_heads()) * c.head_dim());
  const int proj = model.params().find("blocks.0.attn.proj.weight");
  ASSERT_GE(proj, 0);
  EXPECT_EQ(model.params().entry(proj).spec.global_shape[1], c.n_head * c.head_dim());
}

// The FLOPs a training step's ops count (ProfilingBackend, the matrix multiplies, the attention
// core and Qwen3's q_norm and k_norm) are the planner's hardware FLOPs of the step
// (plan/flops.hpp): no op the planner leaves out, none it counts that the step does not run;
// with a sliding window both count the window's share of the s x s (core/attended_pairs.hpp).
TEST_P(ModelFamily, CountedFlopsAreThePlanners) {
  ModelConfig c = micro(GetParam());
  c.vocab_size = 16;  // no padding rows: the head's GEMM is vocab x d
  const std::int64_t batch = 2, seq = c.seq_len;
  const StepBenchmarkResult r = run_step_benchmark(c, batch, seq, 1, 0, true);
  double counted = 0;
  for (const auto& [name, op] : r.ops) counted += op.flops;
  const double planned = hardware_flops_per_token(c, seq, false, false) * batch * seq;
  if (c.moe.capacity_factor > 0) {
    // A capacity factor skips the dropped rows' expert GEMMs (docs/moe.md, "Capacity factor"),
    // which the planner's model FLOPs count: whole rows of 3 matrices, forward and backward.
    const double row = 6.0 * 3.0 * static_cast<double>(c.d_model * c.expert_hidden());
    const double skipped = (planned - counted) / row;
    EXPECT_NEAR(skipped, std::round(skipped), 1e-6);
    EXPECT_GE(skipped, 1.0);
    EXPECT_LE(skipped, static_cast<double>(batch * seq * c.moe.top_k * c.n_layer));
    return;
  }
  EXPECT_NEAR(counted, planned, 1e-9 * planned);
}

// Recomputation reruns the same kernels on the same inputs: gradients and losses are
// bit-identical to keeping the activations, and the activations kept shrink.
TEST_P(ModelFamily, RecomputeIsBitIdentical) {
  ModelConfig c = micro(GetParam());
  c.d_model = 32;
  c.d_ff = c.is_llama() ? 88 : 128;
  c.vocab_size = 300;
  c.seq_len = 16;
  c.init_std = 0.02;
  const std::int64_t B = 3, T = 16;
  const auto tokens = random_tokens(B * T, c.vocab_size, 1);
  const auto targets = random_tokens(B * T, c.vocab_size, 2);
  std::vector<float> reference;
  double reference_loss = 0;
  std::size_t reference_activations = 0;
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    MemoryTracker memory;
    auto backend = make_cpu_backend(memory);
    GptModel model(*backend, c, DType::f32, B, T, 1, {}, mode);
    model.params().initialize(11);
    model.params().begin_step();
    const double loss = model.forward_backward(tokens.data(), targets.data(), 1.0 / (B * T));
    const Tensor g = model.params().grads();
    std::vector<float> grads(g.as<float>(), g.as<float>() + g.numel());
    const std::size_t activations = memory.current(MemoryKind::activations);
    if (mode == Recompute::none) {
      reference = grads;
      reference_loss = loss;
      reference_activations = activations;
      continue;
    }
    EXPECT_EQ(loss, reference_loss);
    EXPECT_EQ(grads, reference) << "recompute mode " << static_cast<int>(mode);
    EXPECT_LT(activations, reference_activations);
  }
}

// A checkpoint's config.json rebuilds the same shape (kv heads, RoPE base and window included).
TEST_P(ModelFamily, ConfigJsonRoundTrips) {
  const ModelConfig c = micro(GetParam());
  const ModelConfig back = model_config_from_json(to_json(c), "test");
  EXPECT_EQ(back.family, c.family);
  EXPECT_EQ(back.kv_heads(), c.kv_heads());
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.sliding_window, c.sliding_window);
  EXPECT_EQ(back.head_dim(), c.head_dim());
  EXPECT_EQ(back.tied_embeddings(), c.tied_embeddings());
  EXPECT_EQ(back.rope_scaling, c.rope_scaling);
  EXPECT_EQ(back.rope_factor, c.rope_factor);
  EXPECT_EQ(back.rope_original_context, c.rope_original_context);
  EXPECT_EQ(parameter_count(back), parameter_count(c));
}

// A manifest's impossible model is refused as the manifest's, naming its field: not as a model.*
// key of a config the user never wrote.
TEST(ModelConfigJson, ImpossibleValuesNameTheFile) {
  nlohmann::json j = to_json(model_preset("gpt-tiny"));
  j["n_head"] = 3;
  try {
    model_config_from_json(j, "run/model/manifest.json");
    ADD_FAILURE() << "n_head 3 of d_model 128 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("run/model/manifest.json: model.d_model = 128 is not "
                                          "divisible by model.n_head = 3", 0),
              0u)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelFamily,
                         ::testing::ValuesIn(testing::kFamilyVariants),
                         [](const auto& info) { return info.param; });
// Mixtures of experts (docs/moe.md): top 2 renormalized, top 1 with a shared expert, and top 2
// with a capacity factor (the dropped choices' gates get no gradient; the kept ones' still
// renormalize over every choice); and a dense block before a MoE block (docs/moe.md, "Dense
// blocks").
INSTANTIATE_TEST_SUITE_P(Moe, ModelFamily,
                         ::testing::Values("llama_moe", "qwen2_moe", "llama_moe_capacity",
                                           "qwen2_moe_dense"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kintsugi
