// AdamW against its textbook formula, the learning-rate schedule and clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "kintsugi/optim/adamw.hpp"
#include "kintsugi/optim/grad_clip.hpp"
#include "kintsugi/optim/loss_scaler.hpp"
#include "kintsugi/optim/lr_schedule.hpp"

namespace kintsugi {
namespace {

TEST(AdamW, MatchesTheFormulaAndSkipsDecayWhereAsked) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  std::vector<double> w(3, 1.0), b(3, 1.0), gw(3), gb(3);
  auto t = [](std::vector<double>& v) { return Tensor{v.data(), DType::f64, Shape{3}}; };
  AdamWConfig cfg{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.5};
  AdamW opt(*backend, {{.param = t(w), .grad = t(gw), .decay = true},
                       {.param = t(b), .grad = t(gb), .decay = false}},
            cfg);
  double ref_p[2] = {1, 1}, m[2] = {0, 0}, v[2] = {0, 0};
  const double lr = 0.1, grads[3] = {0.5, -2.0, 0.25};
  for (int step = 1; step <= 3; ++step) {
    for (int k = 0; k < 3; ++k) gw[k] = gb[k] = grads[step - 1] * (k + 1);
    opt.step(lr, 0.5);
    for (int which = 0; which < 2; ++which) {  // element 1 of w and of b
      const double g = 0.5 * grads[step - 1] * 2;
      m[which] = 0.9 * m[which] + 0.1 * g;
      v[which] = 0.99 * v[which] + 0.01 * g * g;
      const double mhat = m[which] / (1 - std::pow(0.9, step));
      const double vhat = v[which] / (1 - std::pow(0.99, step));
      const double decay = which == 0 ? 0.5 : 0.0;
      ref_p[which] = ref_p[which] * (1 - lr * decay) - lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
    EXPECT_NEAR(w[1], ref_p[0], 1e-12);
    EXPECT_NEAR(b[1], ref_p[1], 1e-12);
  }
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .decay_steps = 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_LT(s.at(4), 1.0);            // the decay's first step
  EXPECT_NEAR(s.at(8), 0.55, 1e-12);  // half way: the mean of max and min
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);    // the 14th step: decay_steps
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
  for (int i = 3; i < 14; ++i) EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(GradClip, Factor) {
  EXPECT_DOUBLE_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_NEAR(clip_factor(4.0, 1.0), 0.25, 1e-6);
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 0.0), 1.0);  // off
}

}  // namespace
}  // namespace kintsugi

namespace kintsugi {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterACleanWindow) {
  LossScaler s(1024, 3);
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(std::nan("")));
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.skipped(), 2);
  EXPECT_TRUE(s.update(1.0));
  EXPECT_TRUE(s.update(1.0));
  EXPECT_EQ(s.scale(), 256);
  EXPECT_TRUE(s.update(1.0));  // third clean step in a row
  EXPECT_EQ(s.scale(), 512);
  LossScaler off;
  EXPECT_TRUE(off.update(3.0));
  EXPECT_FALSE(off.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(off.scale(), 1.0);
}

}  // namespace
}  // namespace kintsugi
