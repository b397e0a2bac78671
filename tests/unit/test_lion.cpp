// Lion (optim/lion.hpp) against its formula, in f64 and in mixed precision, and the interface
// that ZeRO and the checkpoints use (one moment, cut like AdamW's).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kintsugi/core/half.hpp"
#include "kintsugi/optim/lion.hpp"

namespace kintsugi {
namespace {

double sign(double x) { return (x > 0) - (x < 0); }

TEST(Lion, MatchesTheFormulaAndSkipsDecayWhereAsked) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  std::vector<double> w(3, 1.0), b(3, 1.0), gw(3), gb(3);
  auto t = [](std::vector<double>& v) { return Tensor{v.data(), DType::f64, Shape{3}}; };
  const OptimizerConfig cfg{.kind = OptimizerKind::lion, .beta1 = 0.9, .beta2 = 0.99,
                            .weight_decay = 0.5};
  const auto opt = make_optimizer(*backend,
                                  {{.param = t(w), .grad = t(gw), .decay = true},
                                   {.param = t(b), .grad = t(gb), .decay = false}},
                                  cfg);
  EXPECT_EQ(opt->kind(), OptimizerKind::lion);
  EXPECT_EQ(opt->moments(), 1);
  EXPECT_EQ(opt->numel(), 6);
  double ref_p[2] = {1, 1}, m[2] = {0, 0};
  const double lr = 0.1, grads[4] = {0.5, -2.0, 0.25, 0.0};
  for (int step = 1; step <= 4; ++step) {
    for (int k = 0; k < 3; ++k) gw[k] = gb[k] = grads[step - 1] * (k + 1);
    opt->step(lr, 0.5);
    for (int which = 0; which < 2; ++which) {  // element 1 of w and of b
      const double g = 0.5 * grads[step - 1] * 2;
      const double c = 0.9 * m[which] + (1 - 0.9) * g;  // the kernel's arithmetic
      const double decay = which == 0 ? 0.5 : 0.0;
      ref_p[which] = ref_p[which] * (1 - lr * decay) - lr * sign(c);
      m[which] = 0.99 * m[which] + (1 - 0.99) * g;
    }
    EXPECT_DOUBLE_EQ(w[1], ref_p[0]) << step;
    EXPECT_DOUBLE_EQ(b[1], ref_p[1]) << step;
    EXPECT_DOUBLE_EQ(opt->moment(0, 4, 1).as<double>()[0], m[1]) << step;  // b's moment
  }
  EXPECT_EQ(opt->steps_taken(), 4);
}

// sign(0) = 0: an element whose gradient and moment are zero (padding rows of the embedding)
// moves only by its weight decay.
TEST(Lion, ZeroUpdateWhereTheInterpolationIsZero) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  std::vector<float> w = {2.0f, -3.0f}, g = {0.0f, 0.0f}, m = {0.0f, 0.0f};
  backend->lion_step(Tensor{w.data(), DType::f32, Shape{2}}, Tensor{g.data(), DType::f32, Shape{2}},
                     Tensor{m.data(), DType::f32, Shape{2}},
                     LionHyper{.lr = 0.1, .weight_decay = 0.5});
  EXPECT_FLOAT_EQ(w[0], 2.0f * 0.95f);
  EXPECT_FLOAT_EQ(w[1], -3.0f * 0.95f);
  EXPECT_EQ(m[0], 0.0f);
}

// Mixed precision: f32 master weights and moment, a bf16 gradient, the bf16 working copy
// rounded from the updated master weights; the same master weights as the all-f32 kernel on
// the widened gradient.
TEST(Lion, MixedPrecisionMatchesF32) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const std::int64_t n = 5000;  // more than one staging chunk
  std::vector<float> w(n), m(n), g32(n), w2, m2;
  std::vector<std::uint16_t> g16(n), copy(n);
  for (std::int64_t i = 0; i < n; ++i) {
    w[i] = std::sin(0.1f * i);
    m[i] = 0.01f * std::cos(0.3f * i);
    g16[i] = float_to_bf16(0.02f * std::sin(0.7f * i + 1));
    g32[i] = bf16_to_float(g16[i]);
  }
  w2 = w, m2 = m;
  const LionHyper h{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                    .grad_scale = 0.7};
  const Tensor copy_t{copy.data(), DType::bf16, Shape{n}};
  backend->lion_step(Tensor{w.data(), DType::f32, Shape{n}},
                     Tensor{g16.data(), DType::bf16, Shape{n}},
                     Tensor{m.data(), DType::f32, Shape{n}}, h, &copy_t);
  backend->lion_step(Tensor{w2.data(), DType::f32, Shape{n}},
                     Tensor{g32.data(), DType::f32, Shape{n}},
                     Tensor{m2.data(), DType::f32, Shape{n}}, h);
  EXPECT_EQ(w, w2);
  EXPECT_EQ(m, m2);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], float_to_bf16(w[i])) << i;
}

}  // namespace
}  // namespace kintsugi
