// RoPE scaling (model/rotary_table.hpp): the angles of Llama 3.1's and YaRN's scaling against
// values computed from Hugging Face's formulas (modeling_rope_utils) in Python, and the rope op
// with a scaled table.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/model/rotary_table.hpp"

namespace kintsugi {
namespace {

void expect_relative(double actual, double expected, const char* what, int i) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::abs(expected)) << what << " pair " << i;
}

// Llama 3.1 8B's head: 128 dimensions, base 500000, factor 8 over 8192 positions.
TEST(RopeScaling, Llama3MatchesHuggingFace) {
  ModelConfig c = model_preset("llama-3.1-8b");
  const RotaryTable t = rotary_table(c);
  ASSERT_EQ(t.inv_freq.size(), 64u);
  // (pair, Hugging Face's inv_freq): kept, blended, blended, divided, divided.
  const std::pair<int, double> reference[] = {{0, 1.0},
                                              {20, 0.016560440080994446},
                                              {40, 3.428102195952591e-05},
                                              {45, 1.2297638677963614e-05},
                                              {63, 3.068925988914511e-07}};
  for (const auto& [i, f] : reference) expect_relative(t.inv_freq[i], f, "llama3", i);
  EXPECT_EQ(t.scale, 1.0);
}

// Qwen2.5's documented YaRN: 128 dimensions, base 1e6, factor 4 over 32768 positions.
TEST(RopeScaling, YarnMatchesHuggingFace) {
  ModelConfig c = model_preset("qwen2.5-7b");
  c.rope_scaling = RopeScaling::yarn;
  c.rope_factor = 4;
  c.rope_original_context = 32768;
  const RotaryTable t = rotary_table(c);
  const std::pair<int, double> reference[] = {{0, 1.0},
                                              {10, 0.1154781984689458},
                                              {20, 0.01333521432163324},
                                              {30, 0.0010643609812470017},
                                              {40, 4.445698525097307e-05},
                                              {63, 3.102344401879299e-07}};
  for (const auto& [i, f] : reference) expect_relative(t.inv_freq[i], f, "yarn", i);
  EXPECT_NEAR(t.scale, 1.138629436111989, 1e-15);  // 0.1 ln 4 + 1
  c.rope_attention_factor = 1.5;
  EXPECT_EQ(rotary_table(c).scale, 1.5);
}

TEST(RopeScaling, LinearDividesEveryFrequencyAndNoneIsPlain) {
  ModelConfig c = model_preset("llama-tiny");
  const RotaryTable plain = RotaryTable::plain(c.rope_theta, c.head_dim());
  EXPECT_EQ(rotary_table(c).inv_freq, plain.inv_freq);
  c.rope_scaling = RopeScaling::linear;
  c.rope_factor = 4;
  const RotaryTable linear = rotary_table(c);
  for (std::size_t i = 0; i < plain.inv_freq.size(); ++i)
    EXPECT_EQ(linear.inv_freq[i], plain.inv_freq[i] / 4);
}

// The op turns each pair by position x inv_freq and scales it; its inverse is the transpose,
// so forward then inverse leaves scale^2 x the input.
TEST(RopeScaling, OpRotatesByTheTableAndScales) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  const AttentionShape s{.batch = 1, .seq = 3, .heads = 2, .kv_heads = 1, .head_dim = 4};
  const std::int64_t width = 4 * 4;  // per kv head: 2 queries, a key, a value
  std::vector<double> x(3 * width);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.7 * static_cast<double>(k) + 0.1);
  RotaryTable table{.inv_freq = {0.5, 0.125}, .scale = 1.25};
  std::vector<double> y = x;
  const Tensor t{y.data(), DType::f64, Shape{3, width}};
  be->rope(s, t, table, false);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 2; ++i) {
      const double angle = r * table.inv_freq[i];
      const double* in = x.data() + r * width;  // the first query head
      const double* out = y.data() + r * width;
      EXPECT_NEAR(out[i], 1.25 * (in[i] * std::cos(angle) - in[i + 2] * std::sin(angle)), 1e-15);
      EXPECT_NEAR(out[i + 2], 1.25 * (in[i + 2] * std::cos(angle) + in[i] * std::sin(angle)),
                  1e-15);
      EXPECT_EQ(out[12 + i], in[12 + i]);  // the value is not rotated
    }
  be->rope(s, t, table, true);
  for (std::size_t k = 0; k < x.size(); ++k)
    if (k % width < 12) EXPECT_NEAR(y[k], 1.5625 * x[k], 1e-14) << k;
}

}  // namespace
}  // namespace kintsugi
