// Batch-size ramp-up: Megatron-LM's formula in exact integers, every step's batch and consumed
// sequences, resuming mid-ramp, the learning-rate rules and the config's refusals.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/run_config.hpp"
#include "support/error_of.hpp"

namespace kintsugi {
namespace {

TrainConfig ramped(std::int64_t global, std::vector<std::int64_t> ramp, std::int64_t steps) {
  TrainConfig t;
  t.global_batch = global;
  t.micro_batch = 1;
  t.batch_rampup = std::move(ramp);
  t.steps = steps;
  return t;
}

// NeMo's documented example: global batch 1024, [256, 128, 50,000,000]: 6 increments, one every
// 50e6 / 6 = 8,333,333.3 samples.
TEST(BatchRampup, MegatronFormulaInIntegers) {
  const BatchRampup r{256, 128, 50'000'000};
  EXPECT_EQ(ramped_batch(r, 1024, 0), 256);
  EXPECT_EQ(ramped_batch(r, 1024, 8'333'333), 256);  // 8,333,333 x 6 / 50e6 = 0.99999996
  EXPECT_EQ(ramped_batch(r, 1024, 8'333'334), 384);
  EXPECT_EQ(ramped_batch(r, 1024, 49'999'999), 896);
  EXPECT_EQ(ramped_batch(r, 1024, 50'000'000), 1024);
  EXPECT_EQ(ramped_batch(r, 1024, 4'000'000'000'000), 1024);
  // Its batches 256 384 ... 1024 split over a layout when its first two and the last do.
  EXPECT_EQ(ramp_batches_to_check(r, 1024), (std::vector<std::int64_t>{256, 384, 1024}));
  EXPECT_EQ(ramped_batch(BatchRampup{}, 1024, 0), 1024);  // no ramp
  EXPECT_EQ(ramp_batches_to_check(BatchRampup{}, 64), (std::vector<std::int64_t>{64}));
  EXPECT_EQ(ramp_batches_to_check(BatchRampup{32, 32, 100}, 64), (std::vector<std::int64_t>{32, 64}));
  // c n overflows 63 bits here; the batch must still be the exact floor.
  const BatchRampup huge{1, 1, 4'000'000'000'000'000'000};
  EXPECT_EQ(ramped_batch(huge, 1'000'001, 3'999'999'999'999'999'999), 1'000'000);
}

TEST(BatchRampup, StepsAndConsumedSequences) {
  // 8 from 2 by 2 over 24 samples: 3 increments, one every 8 consumed sequences.
  const BatchSchedule s(ramped(8, {2, 2, 24}, 12));
  const std::vector<std::int64_t> want = {2, 2, 2, 2, 4, 4, 6, 6, 8, 8, 8, 8};
  std::int64_t consumed = 0;
  for (std::int64_t step = 0; step < 12; ++step) {
    EXPECT_EQ(s.batch(step), want[static_cast<std::size_t>(step)]) << "step " << step;
    EXPECT_EQ(s.consumed_before(step), consumed);
    consumed += want[static_cast<std::size_t>(step)];
  }
  EXPECT_EQ(s.consumed_before(12), consumed);
  EXPECT_EQ(s.first_full_step(), 8);
  EXPECT_TRUE(s.ramped());
  const BatchSchedule flat(ramped(8, {}, 3));
  EXPECT_FALSE(flat.ramped());
  EXPECT_EQ(flat.consumed_before(3), 24);
  EXPECT_EQ(flat.first_full_step(), 0);
}

// The steps a budget of sequences takes (plan --write-config's train.steps): the first step
// whose schedule has consumed them all, phase by phase of the ramp as BatchSchedule steps.
TEST(BatchRampup, StepsToConsumeABudget) {
  for (const auto& ramp : std::vector<std::vector<std::int64_t>>{
           {}, {2, 2, 24}, {2, 2, 25}, {3, 5, 7}, {8, 2, 100}, {1, 1, 1000}}) {
    const std::int64_t global = ramp.empty() ? 8 : (ramp == std::vector<std::int64_t>{3, 5, 7} ? 18 : 8);
    const BatchSchedule s(ramped(global, ramp, 400));
    for (std::int64_t sequences = 1; sequences <= 600; ++sequences) {
      std::int64_t want = 0;
      while (s.consumed_before(want) < sequences) ++want;
      ASSERT_EQ(steps_to_consume(batch_rampup_of(ramped(global, ramp, 400)), global, sequences),
                want)
          << "ramp of " << ramp.size() << " values, " << sequences << " sequences";
    }
  }
  // A budget of 1e12 tokens at 512 x 2048 without a ramp: 953,674.3 steps, so 953,675.
  EXPECT_EQ(steps_to_consume(BatchRampup{}, 512, 488'281'250), 953'675);
}

// The schedule step by step, as a run takes it: the reference the lazy BatchSchedule must match.
struct EagerSchedule {
  std::vector<std::int64_t> batch, consumed;
  EagerSchedule(const TrainConfig& t, std::int64_t start_step, std::int64_t consumed_at_start) {
    const BatchRampup ramp = batch_rampup_of(t);
    std::int64_t c = 0;
    for (std::int64_t s = 0; s <= t.steps; ++s) {
      if (s == start_step && consumed_at_start >= 0) c = consumed_at_start;
      consumed.push_back(c);
      batch.push_back(ramped_batch(ramp, t.global_batch, c));
      c += batch.back();
    }
  }
};

TEST(BatchRampup, LazyScheduleMatchesTheStepByStepOne) {
  for (const auto& [global, ramp] :
       std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>>{
           {8, {2, 2, 24}}, {8, {2, 3, 24}}, {1024, {256, 128, 5000}}, {64, {1, 1, 100}},
           {64, {1, 1, 10'000}}, {8, {8, 1, 10}}, {8, {}}, {96, {32, 32, 7}}}) {
    TrainConfig t = ramped(global, ramp, 300);
    if (!ramp.empty() && (global - ramp[0]) % ramp[1] != 0) t.global_batch = ramp[0] + 2 * ramp[1];
    for (const auto& [start, at_start] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {0, -1}, {7, -1}, {7, 3}, {40, 5000}, {300, -1}}) {
      const EagerSchedule want(t, start, at_start);
      const BatchSchedule lazy(t, start, at_start);
      const std::string what = fmt::format("ramp [{}] to {}, resumed at {} from {}",
                                           fmt::join(ramp, ", "), t.global_batch, start, at_start);
      std::int64_t first_full = t.steps;
      for (std::int64_t s = t.steps; s-- > 0;)
        if (want.batch[s] == t.global_batch) first_full = s;
      // Asked in order, backwards, and from the schedule's change points.
      for (std::int64_t s = 0; s <= t.steps; ++s)
        ASSERT_EQ(lazy.consumed_before(s), want.consumed[s]) << what << ", step " << s;
      for (std::int64_t s = t.steps; s-- > 0;)
        ASSERT_EQ(lazy.batch(s), want.batch[s]) << what << ", step " << s;
      for (std::int64_t s = 0; s < t.steps; s = lazy.next_batch_change(s))
        for (std::int64_t k = s + 1; k < lazy.next_batch_change(s); ++k)
          ASSERT_EQ(want.batch[k], want.batch[s]) << what << ", steps " << s << ".." << k;
      EXPECT_EQ(lazy.first_full_step(), first_full) << what;
    }
  }
}

// Nothing is expanded per step: a trillion steps and a ramp through two million batches cost
// nothing until asked, and a late step is found in one walk over the ramp's batches (the
// sequences of the run, 2e18, stay within 64 bits, as validate requires).
TEST(BatchRampup, ScheduleOfATrillionStepsIsLazy) {
  const std::int64_t global = 2'000'000, steps = 1'000'000'000'000;
  const TrainConfig t = ramped(global, {1, 1, 4'000'000}, steps);
  const BatchSchedule s(t);
  // The batch grows by about half each step (1, 1, 1, 2, 3, ...): the full one comes early.
  const BatchRampup ramp = batch_rampup_of(t);
  std::int64_t full = 0;
  for (std::int64_t c = 0; ramped_batch(ramp, global, c) < global; ++full)
    c += ramped_batch(ramp, global, c);
  EXPECT_EQ(s.batch(0), 1);
  EXPECT_EQ(s.consumed_before(1), 1);
  EXPECT_EQ(s.batch(steps - 1), global);
  EXPECT_EQ(s.first_full_step(), full);
  EXPECT_LT(s.batch(full - 1), global);
  const std::int64_t change = s.next_batch_change(10);
  EXPECT_GT(s.batch(change), s.batch(10));
  EXPECT_EQ(s.next_batch_change(full), steps);
  EXPECT_EQ(s.consumed_before(steps) - s.consumed_before(full), (steps - full) * global);
}

TEST(BatchRampup, ResumeContinuesFromTheCheckpointsCount) {
  const TrainConfig t = ramped(8, {2, 2, 24}, 12);
  const BatchSchedule full(t);
  for (std::int64_t start : {0, 3, 5, 8, 12}) {
    const BatchSchedule resumed(t, start, full.consumed_before(start));
    EXPECT_EQ(resumed.replayed_consumed_at_start(), full.consumed_before(start));
    for (std::int64_t step = start; step < 12; ++step) {
      EXPECT_EQ(resumed.batch(step), full.batch(step));
      EXPECT_EQ(resumed.consumed_before(step + 1), full.consumed_before(step + 1));
    }
  }
  // A checkpoint of a run that consumed more (a larger batch before): the ramp goes on from
  // its count, not from this config's replay.
  const BatchSchedule other(t, 2, 16);
  EXPECT_EQ(other.replayed_consumed_at_start(), 4);
  EXPECT_EQ(other.consumed_before(2), 16);
  EXPECT_EQ(other.batch(2), 6);  // floor(16 x 3 / 24) = 2 increments
  EXPECT_EQ(other.batch(3), 6);  // 22
  EXPECT_EQ(other.batch(4), 8);  // 28 >= 24
}

TEST(BatchRampup, LearningRateRules) {
  EXPECT_EQ(batch_lr_factor(BatchLrRule::none, 2, 8), 1.0);
  EXPECT_DOUBLE_EQ(batch_lr_factor(BatchLrRule::sqrt, 2, 8), 0.5);
  EXPECT_DOUBLE_EQ(batch_lr_factor(BatchLrRule::linear, 2, 8), 0.25);
  EXPECT_EQ(batch_lr_factor(BatchLrRule::sqrt, 8, 8), 1.0);
  EXPECT_EQ(batch_lr_rule_of("sqrt"), BatchLrRule::sqrt);
  EXPECT_NE(error_of([] { batch_lr_rule_of("cubic"); }).find("must be \"none\", \"sqrt\""),
            std::string::npos);
}

TEST(BatchRampup, ConfigRefusals) {
  auto load = [](std::vector<std::string> overrides) {
    return error_of([&] { load_run_config("", overrides); });
  };
  EXPECT_EQ(load({"train.global_batch=8", "train.micro_batch=1", "train.batch_rampup=[2, 2, 24]"}),
            "");
  EXPECT_NE(load({"train.batch_rampup=[2, 2]"}).find("three positive whole numbers"),
            std::string::npos);
  EXPECT_NE(load({"train.batch_rampup=[0, 2, 10]"}).find("three positive whole numbers"),
            std::string::npos);
  EXPECT_NE(load({"train.global_batch=8", "train.micro_batch=1", "train.batch_rampup=[16, 2, 10]"})
                .find("starts at 16 sequences, above train.global_batch = 8"),
            std::string::npos);
  EXPECT_NE(load({"train.global_batch=8", "train.micro_batch=1", "train.batch_rampup=[3, 2, 10]"})
                .find("8 - start 3 = 5 is not a multiple of the increment 2"),
            std::string::npos);
  EXPECT_NE(load({"train.batch_lr_rule=\"linear\""}).find("it needs train.batch_rampup"),
            std::string::npos);
  // Every batch of the ramp must split over micro_batch x dp: 2 5 8 does not over 2 x 1.
  RunConfig c = load_run_config("", {"train.global_batch=8", "train.micro_batch=2",
                                     "train.batch_rampup=[2, 3, 24]"});
  EXPECT_NE(error_of([&] { resolve_layout(c, 1); })
                .find("train.batch_rampup passes through a global batch of 5"),
            std::string::npos);
  // 2 4 6 8 over dp 2 x micro-batch 1 does.
  RunConfig ok = load_run_config("", {"train.global_batch=8", "train.micro_batch=1",
                                      "train.batch_rampup=[2, 2, 24]", "parallel.dp=2"});
  EXPECT_EQ(error_of([&] { resolve_layout(ok, 2); }), "");
  // ... and over dp 4 it does not (2 sequences for 4 ranks).
  RunConfig dp4 = load_run_config("", {"train.global_batch=8", "train.micro_batch=1",
                                       "train.batch_rampup=[2, 2, 24]", "parallel.dp=4"});
  EXPECT_NE(error_of([&] { resolve_layout(dp4, 4); }).find("global batch of 2"), std::string::npos);
}

}  // namespace
}  // namespace kintsugi
