// The whole GPT model: gradient accumulation over micro-batches, parameter counts, memory
// categories, and initialization that does not depend on the layout. Gradients against finite
// differences and recomputation, for every family: test_model_families.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kintsugi/core/rng.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/plan/flops.hpp"
#include "support/random_tokens.hpp"

namespace kintsugi {
namespace {

ModelConfig micro_config() {
  ModelConfig c;
  c.name = "micro";
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 2;
  c.d_ff = 16;
  c.vocab_size = 11;
  c.vocab_pad_multiple = 8;  // 16 rows: padding is exercised
  c.seq_len = 6;
  c.init_std = 0.3;  // large enough that every path carries signal
  return c;
}

using testing::random_tokens;

TEST(GptModel, MicroBatchAccumulationEqualsOneBigBatch) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  ModelConfig c = micro_config();
  c.init_std = 0.02;
  const std::int64_t B = 4, T = 6;
  GptModel whole(*backend, c, DType::f32, B, T);
  GptModel pieces(*backend, c, DType::f32, 1, T);
  whole.params().initialize(9);
  pieces.params().initialize(9);
  auto tokens = random_tokens(B * T, c.vocab_size, 5);
  auto targets = random_tokens(B * T, c.vocab_size, 6);
  const double scale = 1.0 / (B * T);

  whole.params().begin_step();
  const double loss_whole = whole.forward_backward(tokens.data(), targets.data(), scale);
  double loss_pieces = 0;
  // Two optimizer steps' worth: the second step must overwrite, not add to, the first's grads.
  for (int step = 0; step < 2; ++step) {
    pieces.params().begin_step();
    loss_pieces = 0;
    for (std::int64_t b = 0; b < B; ++b)
      loss_pieces += pieces.forward_backward(tokens.data() + b * T, targets.data() + b * T, scale);
  }
  EXPECT_NEAR(loss_whole, loss_pieces, 1e-5 * std::abs(loss_whole));
  Tensor g1 = whole.params().grads(), g2 = pieces.params().grads();
  double max_abs = 0, max_diff = 0;
  for (std::int64_t i = 0; i < g1.numel(); ++i) {
    max_abs = std::max(max_abs, std::abs(double(g1.as<float>()[i])));
    max_diff = std::max(max_diff, std::abs(double(g1.as<float>()[i] - g2.as<float>()[i])));
  }
  EXPECT_GT(max_abs, 0.0);
  EXPECT_LT(max_diff, 1e-5 * max_abs);
}

TEST(GptModel, ParameterCountsMatchTheFormulas) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ModelConfig c = micro_config();
  GptModel model(*backend, c, DType::f32, 1, c.seq_len);
  std::int64_t stored = 0;
  for (int i = 0; i < model.params().size(); ++i) {
    const auto& e = model.params().entry(i);
    Shape s = e.spec.global_shape;
    if (e.spec.valid_rows >= 0) s.dims[0] = e.spec.valid_rows;
    stored += s.numel();
  }
  EXPECT_EQ(stored, parameter_count(c));
  // GPT-2 small: 124,439,808 parameters with the 50257-token vocabulary (as Hugging Face counts).
  EXPECT_EQ(parameter_count(model_preset("gpt2")), 124439808);
  EXPECT_NEAR(parameter_count(model_preset("gpt2-xl")) / 1e9, 1.558, 0.001);
  EXPECT_NEAR(parameter_count(model_preset("gpt-22b")) / 1e9, 22.0, 0.5);
  EXPECT_NEAR(parameter_count(model_preset("gpt-175b")) / 1e9, 175.0, 1.0);
  // Hugging Face's LlamaForCausalLM counts (untied head, RMSNorm, SwiGLU, no biases).
  EXPECT_EQ(parameter_count(model_preset("llama-7b")), 6738415616);
  EXPECT_EQ(parameter_count(model_preset("llama-13b")), 13015864320);
  EXPECT_EQ(parameter_count(model_preset("llama-65b")), 65285660672);
  EXPECT_NEAR(parameter_count(model_preset("bloom-13b")) / 1e9, 13.87, 0.01);
}

TEST(GptModel, MemoryIsTrackedByCategory) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const ModelConfig c = micro_config();
  GptModel model(*backend, c, DType::f32, 2, c.seq_len);
  const std::size_t params = model.params().numel() * sizeof(float);
  EXPECT_EQ(memory.current(MemoryKind::parameters), params);
  EXPECT_EQ(memory.current(MemoryKind::gradients), params);
  EXPECT_GT(memory.current(MemoryKind::activations), 0u);
  EXPECT_GT(memory.current(MemoryKind::workspace), 0u);
}

}  // namespace
}  // namespace kintsugi

namespace kintsugi {
namespace {

// A shard initializes exactly its part of the serial tensor, whichever dimension is split and
// wherever the split starts (odd offsets included).
TEST(ParamStore, ShardsInitializeTheirPartOfTheSerialTensor) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  ParamStore whole;
  whole.add({.name = "w", .global_shape = {6, 5}, .init_std = 0.5});
  whole.add({.name = "v", .global_shape = {9}, .init_std = 1.0});
  whole.end_unit("all");
  whole.allocate_full(*backend, DType::f64, DType::f64);
  whole.initialize(3);
  for (int split_dim : {0, 1}) {
    const std::int64_t extent = split_dim == 0 ? 3 : 2, begin = split_dim == 0 ? 3 : 1;
    ParamStore part;
    part.add({.name = "w", .global_shape = {6, 5}, .init_std = 0.5, .split_dim = split_dim,
              .split_begin = begin, .split_extent = extent});
    part.add({.name = "v", .global_shape = {9}, .init_std = 1.0, .split_dim = 0,
              .split_begin = 5, .split_extent = 3});
    part.end_unit("all");
    part.allocate_full(*backend, DType::f64, DType::f64);
    part.initialize(3);
    const Tensor w = whole.param(0), pw = part.param(0);
    for (std::int64_t i = 0; i < pw.shape[0]; ++i)
      for (std::int64_t j = 0; j < pw.shape[1]; ++j) {
        const std::int64_t gi = split_dim == 0 ? i + begin : i, gj = split_dim == 1 ? j + begin : j;
        EXPECT_EQ(pw.as<double>()[i * pw.shape[1] + j], w.as<double>()[gi * 5 + gj]);
      }
    for (std::int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(part.param(1).as<double>()[i], whole.param(1).as<double>()[5 + i]);
  }
  // and element g is normal_at(seed, stream, g) scaled (drawn in float32)
  EXPECT_EQ(whole.param(1).as<double>()[4], static_cast<float>(normal_at(3, stream_of("v"), 4)));
}

}  // namespace
}  // namespace kintsugi
