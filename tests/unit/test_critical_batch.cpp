// The planner's batch limits: the critical batch of Kaplan et al.'s fit, and the batch ramp-up
// it suggests for a layout (GPT-3's recipe), whose every batch the layout must split.
#include <gtest/gtest.h>

#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/parallel/layout_rules.hpp"
#include "kintsugi/plan/critical_batch.hpp"
#include "kintsugi/plan/rampup_suggestion.hpp"

namespace kintsugi {
namespace {

TEST(CriticalBatch, KaplanFit) {
  // B_crit(L) = 2e8 / L^(1/0.21): at L = 1 the constant itself; L^(1/0.21) = e^(ln L / 0.21).
  EXPECT_DOUBLE_EQ(critical_batch_tokens(1.0), 2e8);
  EXPECT_NEAR(critical_batch_tokens(2.5), 2e8 / std::exp(std::log(2.5) / 0.21), 1e-6);
  EXPECT_NEAR(critical_batch_tokens(2.5), 2.547e6, 1e3);  // the number docs/planner.md quotes
  EXPECT_EQ(critical_batch_sequences(2.5, 2048), 1243);
  EXPECT_EQ(critical_batch_sequences(50.0, 2048), 1);  // never below one sequence
  // A tiny loss: B_crit = 4e22 tokens, saturated, not wrapped round to 1 sequence.
  EXPECT_EQ(critical_batch_sequences(0.001, 2048), kUnboundedCriticalBatch);
  EXPECT_GT(critical_batch_tokens(2.0), critical_batch_tokens(3.0));  // lower loss, larger batch
  EXPECT_THROW(critical_batch_tokens(0.0), Error);
  EXPECT_THROW(critical_batch_tokens(std::nan("")), Error);
}

bool splits(const ModelConfig& m, const Layout& l, std::int64_t batch) {
  return layout_problem(m, layout_spec(l, batch)).empty();
}

// The planner's Layout reaches the rule book whole: the record itself, with the batch.
TEST(CriticalBatch, LayoutSpecCarriesEveryField) {
  const Layout l{.parallel = {.tp = 8,
                              .pp = 2,
                              .dp = 4,
                              .schedule = PipelineSchedule::interleaved,
                              .virtual_stages = 2,
                              .zero = ZeroStage::gradients,
                              .hsdp = 2,
                              .sequence_parallel = true,
                              .tensor_grid = {2, 2, 2},
                              .tensor_grid_overlap = false},
                 .micro_batch = 3,
                 .recompute = Recompute::full};
  const LayoutSpec s = layout_spec(l, 96);
  EXPECT_EQ(s.parallel, l.parallel);
  EXPECT_EQ(s.micro_batch, 3);
  EXPECT_EQ(s.global_batch, 96);
}

// A grid layout gets its ramp-up: the suggestion asks the rule book about the grid, not about
// 1D tensor parallelism over its 8 ranks (which GPT-2's 12 heads do not allow). `kintsugi plan
// --model gpt2 --cluster dgx-h100 --global-batch 512 --tensor-grid 2,2,2 --rampup-tokens 4e9`
// answered "none" before.
TEST(CriticalBatch, RampupSuggestionForAGrid) {
  const ModelConfig m = model_preset("gpt2");
  const Layout grid{.parallel = {.tp = 8, .dp = 1, .tensor_grid = {2, 2, 2}}, .micro_batch = 2};
  ASSERT_TRUE(layout_problem(m, layout_spec(grid, 512)).empty());
  const auto r = suggest_rampup(m, grid, 512, 4e9);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->start, 32);  // 32K tokens = 32 sequences of 1024, a multiple of dp x mb = 2
  EXPECT_EQ(r->increment, 2);
  for (std::int64_t b = r->start; b <= 512; b += r->increment) EXPECT_TRUE(splits(m, grid, b)) << b;
}

TEST(CriticalBatch, RampupSuggestion) {
  ModelConfig m = model_preset("gpt-tiny");
  m.seq_len = 1024;
  Layout l;
  l.parallel.dp = 4;
  l.micro_batch = 2;
  // 32K tokens = 32 sequences of 1024, a multiple of dp x mb = 8; 4e9 tokens = 3,906,250.
  const auto r = suggest_rampup(m, l, 64, 4e9);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->start, 32);
  EXPECT_EQ(r->increment, 8);
  EXPECT_EQ(r->samples, 3906250);
  EXPECT_FALSE(suggest_rampup(m, l, 32, 4e9));  // the full batch is the ramp's start
  EXPECT_FALSE(suggest_rampup(m, l, 64, 100));  // under one sequence
  // Interleaved over 4 stages: whatever the step, every batch of the ramp splits.
  Layout p;
  p.parallel.pp = 4;
  p.parallel.dp = 2;
  p.parallel.schedule = PipelineSchedule::interleaved;
  p.parallel.virtual_stages = 2;
  m.n_layer = 8;
  const auto q = suggest_rampup(m, p, 256, 1e9);
  ASSERT_TRUE(q);
  EXPECT_GE(q->start * m.seq_len, 32768);
  for (std::int64_t b = q->start; b <= 256; b += q->increment) EXPECT_TRUE(splits(m, p, b)) << b;
  EXPECT_EQ((256 - q->start) % q->increment, 0);
}

}  // namespace
}  // namespace kintsugi
