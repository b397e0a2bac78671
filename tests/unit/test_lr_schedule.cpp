// Learning-rate schedules (optim/lr_schedule.hpp): each shape's values at the steps that define
// it, and the config keys that choose it (train.lr_schedule, train.lr_decay_fraction).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/train/resume_notes.hpp"
#include "kintsugi/train/run_config.hpp"
#include "support/configs.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

LrSchedule schedule(LrShape shape, std::int64_t warmup = 4, std::int64_t decay = 14,
                    double fraction = 0.2) {
  return {.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = warmup, .decay_steps = decay,
          .shape = shape, .decay_fraction = fraction};
}

// Every shape warms up the same way: step s (0-based) of the warm-up has max_lr (s + 1) / w.
TEST(LrSchedule, EveryShapeWarmsUpLinearly) {
  for (const auto& [shape, name] : EnumNames<LrShape>::values) {
    const LrSchedule s = schedule(shape);
    EXPECT_DOUBLE_EQ(s.at(0), 0.25) << name;
    EXPECT_DOUBLE_EQ(s.at(1), 0.5) << name;
    EXPECT_DOUBLE_EQ(s.at(3), 1.0) << name;
  }
}

TEST(LrSchedule, Linear) {
  const LrSchedule s = schedule(LrShape::linear);  // warm-up steps 0..3, decay steps 4..13
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);      // the warm-up's last step
  EXPECT_NEAR(s.at(4), 0.91, 1e-12);   // 1/10 of the way
  EXPECT_NEAR(s.at(8), 0.55, 1e-12);   // half way
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);     // the 14th step: decay_steps reached
  EXPECT_DOUBLE_EQ(s.at(1000), 0.1);
  for (int i = 3; i < 13; ++i) EXPECT_NEAR(s.at(i) - s.at(i + 1), 0.09, 1e-12);  // a line
}

// The decaying shapes train the decay_steps-th step (0-based decay_steps - 1, a run's last step
// when decay_steps is train.steps) at min_lr exactly, and every step before it above min_lr.
// (They used to reach min_lr one step later, after a run's last step: it trained at
// min_lr + (lr - min_lr) / decay_length, or nearly min_lr for the cosine.)
TEST(LrSchedule, TheLastStepOfTheDecayTrainsAtMinLr) {
  for (const LrShape shape : {LrShape::linear, LrShape::cosine, LrShape::wsd})
    for (const auto& [warmup, decay] : {std::pair<std::int64_t, std::int64_t>{4, 14}, {0, 10},
                                        {0, 1}, {1, 2}, {10, 100}, {3, 5}})
      for (const double fraction : {0.01, 0.2, 1.0}) {
        const LrSchedule s = schedule(shape, warmup, decay, fraction);
        const std::string what = fmt::format("{} warmup {} decay {} fraction {}",
                                             name_of(shape), warmup, decay, fraction);
        EXPECT_EQ(s.at(decay - 1), 0.1) << what;
        if (decay - 2 >= warmup) EXPECT_GT(s.at(decay - 2), 0.1) << what;
        for (std::int64_t i = std::max<std::int64_t>(0, warmup - 1); i < decay; ++i)
          EXPECT_GE(s.at(i), s.at(i + 1)) << what << " step " << i;
        if (warmup > 0) EXPECT_EQ(s.at(warmup - 1), 1.0) << what;  // the warm-up's peak
      }
}

TEST(LrSchedule, Constant) {
  const LrSchedule s = schedule(LrShape::constant);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(14), 1.0);  // decay_steps and min_lr do not apply
  EXPECT_DOUBLE_EQ(s.at(1000000), 1.0);
}

TEST(LrSchedule, InverseSquareRoot) {
  const LrSchedule s = schedule(LrShape::inverse_sqrt);
  EXPECT_DOUBLE_EQ(s.at(4), std::sqrt(4.0 / 5.0));  // the step after the warm-up
  EXPECT_DOUBLE_EQ(s.at(15), 0.5);                   // n = 16: sqrt(4 / 16)
  EXPECT_DOUBLE_EQ(s.at(63), 0.25);                  // n = 64
  EXPECT_DOUBLE_EQ(s.at(399), 0.1);                  // n = 400 reaches min_lr ...
  EXPECT_DOUBLE_EQ(s.at(100000), 0.1);               // ... and stays there
  EXPECT_DOUBLE_EQ(s.at(14), std::sqrt(4.0 / 15.0));  // decay_steps does not apply
  // Without a warm-up the first step has max_lr and the n-th max_lr / sqrt(n).
  const LrSchedule bare = schedule(LrShape::inverse_sqrt, 0);
  EXPECT_DOUBLE_EQ(bare.at(0), 1.0);
  EXPECT_DOUBLE_EQ(bare.at(3), 0.5);
}

// Warmup-stable-decay: max_lr until the last decay_fraction of decay_steps, then a straight
// line to min_lr at the decay_steps-th step.
TEST(LrSchedule, WarmupStableDecay) {
  const LrSchedule s = schedule(LrShape::wsd, 2, 20, 0.25);  // decays over steps 15..19
  EXPECT_EQ(s.decay_start(), 15);
  EXPECT_DOUBLE_EQ(s.at(0), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_DOUBLE_EQ(s.at(14), 1.0);  // the last stable step
  EXPECT_NEAR(s.at(15), 0.82, 1e-12);
  EXPECT_NEAR(s.at(18), 0.28, 1e-12);
  EXPECT_DOUBLE_EQ(s.at(19), 0.1);  // the 20th step, the last of a 20-step run
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  for (int i = 0; i < 30; ++i)
    if (i >= 2) EXPECT_GE(s.at(i), s.at(i + 1));
  // The whole run decaying is the linear schedule; the decay never starts inside the warm-up.
  const LrSchedule all = schedule(LrShape::wsd, 4, 14, 1.0);
  EXPECT_EQ(all.decay_start(), 4);
  for (int i = 0; i < 20; ++i) EXPECT_DOUBLE_EQ(all.at(i), schedule(LrShape::linear).at(i));
  // A fraction that rounds to no step still decays the last one.
  EXPECT_EQ(schedule(LrShape::wsd, 0, 4, 0.1).decay_start(), 3);
}

// The cosine is the default.
TEST(LrSchedule, CosineIsTheDefault) {
  const RunConfig c = load_run_config("", {});
  EXPECT_EQ(c.train.lr_schedule, LrShape::cosine);
  const LrSchedule s = schedule(LrShape::cosine);
  EXPECT_NEAR(s.at(8), 0.55, 1e-12);  // half way
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);
}

using testing::run_config_error;

TEST(LrSchedule, ChosenByConfigAndCheckedUpFront) {
  const RunConfig c = load_run_config(
      "", {"train.lr_schedule=\"wsd\"", "train.lr_decay_fraction=0.1", "train.steps=100"});
  const LrSchedule s = lr_schedule_of(c.train);
  EXPECT_EQ(s.shape, LrShape::wsd);
  EXPECT_EQ(s.decay_start(), 90);
  EXPECT_DOUBLE_EQ(s.at(89), c.train.lr);
  EXPECT_NE(run_config_toml(c).find("lr_schedule = 'wsd'"), std::string::npos);
  EXPECT_NE(run_config_error({"train.lr_schedule=\"cosin\""})
                .find("train.lr_schedule = \"cosin\": use \"cosine\", \"linear\", \"constant\", "
                      "\"inverse_sqrt\" or \"wsd\""),
            std::string::npos);
  for (const char* bad : {"0", "1.5", "-0.1"})
    EXPECT_NE(run_config_error({std::string("train.lr_decay_fraction=") + bad})
                  .find("train.lr_decay_fraction"),
              std::string::npos)
        << bad;
  EXPECT_EQ(run_config_error({"train.lr_decay_fraction=1"}), "");
}

// A resume that switches the schedule (to decay a wsd run, say) says so, with both rates.
TEST(LrSchedule, AResumeThatChangesTheShapeSaysSo) {
  const RunConfig cosine = load_run_config("", {"train.steps=100"});
  const RunConfig wsd = load_run_config("", {"train.steps=100", "train.lr_schedule=\"wsd\""});
  const nlohmann::json saved = {{"lr_schedule", lr_schedule_json(cosine.train)}};
  const auto notes = schedule_change_notes(saved, wsd.train, 50);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("train.lr_schedule \"cosine\" -> \"wsd\""), std::string::npos)
      << notes[0];
  EXPECT_TRUE(schedule_change_notes(saved, cosine.train, 50).empty());
  // A checkpoint from before the schedule had a name followed the cosine: no change.
  nlohmann::json old = saved;
  old["lr_schedule"].erase("lr_schedule");
  old["lr_schedule"].erase("lr_decay_fraction");
  EXPECT_TRUE(schedule_change_notes(old, cosine.train, 50).empty());
}

// The validation set is a number of windows, whatever the micro-batch; the deprecated
// train.eval_batches keeps its meaning (eval_batches x micro_batch windows) with a note.
TEST(EvalSequences, IndependentOfTheMicroBatch) {
  const RunConfig a = load_run_config("", {"train.eval_sequences=12", "train.micro_batch=2"});
  const RunConfig b = load_run_config("", {"train.eval_sequences=12", "train.micro_batch=8"});
  EXPECT_EQ(eval_sequences_of(a.train), 12);
  EXPECT_EQ(eval_sequences_of(b.train), 12);
  EXPECT_TRUE(config_notes(a).empty());
  const RunConfig old = load_run_config("", {"train.eval_batches=3", "train.micro_batch=2"});
  EXPECT_EQ(eval_sequences_of(old.train), 6);
  ASSERT_EQ(config_notes(old).size(), 1u);
  EXPECT_NE(config_notes(old)[0].find("set train.eval_sequences = 6 instead"), std::string::npos);
  // Written back as the windows it meant.
  const std::string toml = run_config_toml(old);
  EXPECT_NE(toml.find("eval_sequences = 6"), std::string::npos);
  EXPECT_NE(toml.find("eval_batches = 0"), std::string::npos);
  // A --set of one replaces the other from the file; both from one source conflict.
  const std::string tiny = testing::configs_dir() + "/gpt-tiny.toml";
  EXPECT_EQ(eval_sequences_of(load_run_config(tiny, {"train.eval_batches=3"}).train), 6);
  EXPECT_NE(run_config_error({"train.eval_batches=3", "train.eval_sequences=6"}).find("both set"),
            std::string::npos);
  EXPECT_NE(run_config_error({"train.eval_sequences=0"})
                .find("train.eval_sequences = 0 must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace kintsugi
