// The `local` cluster of a device and the measurements behind it, run on the CPU backend: the
// code a GPU's spec comes from is the same, over another Backend. Nothing here asserts a speed,
// only what was measured, where it went and that the planner uses it.
#include <gtest/gtest.h>

#include <cmath>

#include "kintsugi/core/cpu_info.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {
namespace {

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

const AttentionShape kSmall{.batch = 2, .seq = 32, .heads = 4, .kv_heads = 2, .head_dim = 16};

TEST(AttentionRate, CountsTheCostModelsAttentionFlops) {
  // Per token and layer, the attention core is the 12 s d term of the model's FLOPs.
  for (const char* name : {"gpt2", "llama-13b"}) {
    const ModelConfig m = model_preset(name);
    const double rest = 6.0 * static_cast<double>(matmul_parameter_count(m));
    EXPECT_NEAR(model_flops_per_token(m, m.seq_len) - rest,
                m.n_layer * attention_core_flops(1, m.seq_len, m.n_head, m.head_dim()) / m.seq_len,
                1e-9 * rest)
        << name;
  }
  const AttentionShape bloom = attention_shape_of(model_preset("bloom-13b"), 3);
  EXPECT_EQ(bloom.batch, 3);
  EXPECT_EQ(bloom.alibi_heads, bloom.heads);
  EXPECT_EQ(representative_sequences(model_preset("gpt2")), 8);  // 8 x 1024 tokens
}

TEST(AttentionRate, MeasuredOnTheBackendsKernels) {
  MemoryTracker memory;
  const auto cpu = make_cpu_backend(memory);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const AttentionRate r = measure_attention_rate(*cpu, kSmall, dtype, 2);
    EXPECT_TRUE(finite_positive(r.tflops)) << name_of(dtype);
    EXPECT_EQ(r.dtype, dtype);
    EXPECT_EQ(r.shape.heads, kSmall.heads);
    EXPECT_EQ(r.hardware, cpu_model_name());
  }
  // The operands are released: measuring again leaves the tracked memory where it was (the
  // backend's own scratch, kept between calls, aside).
  const std::size_t after_one = memory.current(MemoryKind::workspace);
  measure_attention_rate(*cpu, kSmall, DType::f32, 1);
  EXPECT_EQ(memory.current(MemoryKind::workspace), after_one);
  EXPECT_THROW(measure_attention_rate(*cpu, kSmall, DType::f64, 1), Error);
  AttentionShape uneven = kSmall;
  uneven.kv_heads = 3;
  EXPECT_THROW(measure_attention_rate(*cpu, uneven, DType::f32, 1), Error);
}

}  // namespace
}  // namespace kintsugi
