// The GELU MLP ops (Backend::linear_gelu_forward, linear_backward_input_gelu) on the CPU backend,
// the oracle of the GPU's fused epilogues: gradients of a two-layer GELU MLP against finite
// differences (f64), the forward against a reference written here, and in mixed precision the
// very bits of the separate ops in sequence, which is what the contract says they compute.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"
#include "mixed_precision_fixture.hpp"

namespace kintsugi {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_vector;
using testing::view;

double gelu_reference(double v) {
  return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

class LinearGelu : public ::testing::Test {
 protected:
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
};

TEST_F(LinearGelu, ForwardIsTheLinearLayerThenGelu) {
  const std::int64_t m = 6, k = 5, n = 9;
  auto x = random_vector(m * k, 1), w = random_vector(n * k, 2), b = random_vector(n, 3);
  for (bool with_bias : {false, true}) {
    std::vector<double> pre(m * n, NAN), y(m * n, NAN);
    const Tensor bt = view(b, {n});
    be->linear_gelu_forward(view(x, {m, k}), view(w, {n, k}), with_bias ? &bt : nullptr,
                            view(pre, {m, n}), view(y, {m, n}));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double p = with_bias ? b[j] : 0.0;
        for (std::int64_t q = 0; q < k; ++q) p += x[i * k + q] * w[j * k + q];
        EXPECT_NEAR(pre[i * n + j], p, 1e-12) << i << "," << j;
        EXPECT_NEAR(y[i * n + j], gelu_reference(p), 1e-12) << i << "," << j;
      }
  }
}

// loss = <gelu(x W1^T + b1) W2^T, r>: dpre through linear_backward_input_gelu, then the first
// layer's gradients from it.
TEST_F(LinearGelu, MlpGradientsMatchFiniteDifferences) {
  const std::int64_t m = 4, d = 5, f = 8;
  auto x = random_vector(m * d, 4), w1 = random_vector(f * d, 5), b1 = random_vector(f, 6);
  auto w2 = random_vector(d * f, 7), r = random_vector(m * d, 8);
  std::vector<double> pre(m * f), act(m * f), y(m * d);
  auto loss = [&] {
    const Tensor bt = view(b1, {f});
    be->linear_gelu_forward(view(x, {m, d}), view(w1, {f, d}), &bt, view(pre, {m, f}),
                            view(act, {m, f}));
    be->linear_forward(view(act, {m, f}), view(w2, {d, f}), nullptr, view(y, {m, d}));
    return dot(y.data(), r.data(), m * d);
  };
  loss();
  std::vector<double> dpre(m * f, NAN), dx(m * d), dw1(f * d), db1(f);
  be->linear_backward_input_gelu(view(r, {m, d}), view(w2, {d, f}), view(pre, {m, f}),
                                 view(dpre, {m, f}));
  const Tensor dbt = view(db1, {f});
  be->linear_backward_weight(view(dpre, {m, f}), view(x, {m, d}), view(dw1, {f, d}), &dbt, false);
  be->linear_backward_input(view(dpre, {m, f}), view(w1, {f, d}), view(dx, {m, d}), false);
  expect_gradient(loss, x.data(), m * d, dx.data(), "dx");
  expect_gradient(loss, w1.data(), f * d, dw1.data(), "dw1");
  expect_gradient(loss, b1.data(), f, db1.data(), "db1");
}

// In bf16 and f16 (and an f32 result from 16-bit operands) the fused ops give the bits of the
// separate ops: pre rounded to its type, GELU of the rounded value; dx rounded, then GELU's
// derivative applied in place.
TEST_F(LinearGelu, MixedPrecisionGivesTheSeparateOpsBits) {
  using mixed_test::Storage;
  using mixed_test::random_values;
  const std::int64_t m = 37, k = 24, n = 40;
  for (DType t : {DType::bf16, DType::f16})
    for (DType out : {t, DType::f32}) {
      Storage s;
      const Tensor x = s.make(t, {m, k}, random_values(m * k, 9));
      const Tensor w = s.make(t, {n, k}, random_values(n * k, 10, 0.3f));
      const Tensor b = s.make(out, {n}, random_values(n, 11));
      const Tensor pre = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      const Tensor y = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      const Tensor pre2 = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      const Tensor y2 = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      be->linear_gelu_forward(x, w, &b, pre, y);
      be->linear_forward(x, w, &b, pre2);
      be->gelu_forward(pre2, y2);
      const std::string what = std::string(name_of(t)) + " -> " + std::string(name_of(out));
      EXPECT_EQ(Storage::values(pre), Storage::values(pre2)) << what;
      EXPECT_EQ(Storage::values(y), Storage::values(y2)) << what;

      const Tensor dy = s.make(t, {m, k}, random_values(m * k, 12));
      const Tensor dx = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      const Tensor dx2 = s.make(out, {m, n}, std::vector<float>(m * n, NAN));
      const Tensor wt = s.make(t, {k, n}, random_values(k * n, 13, 0.3f));  // the next layer's
      be->linear_backward_input_gelu(dy, wt, pre, dx);
      be->linear_backward_input(dy, wt, dx2, false);
      be->gelu_backward(pre, dx2, dx2);
      EXPECT_EQ(Storage::values(dx), Storage::values(dx2)) << what;
    }
}

}  // namespace
}  // namespace kintsugi
