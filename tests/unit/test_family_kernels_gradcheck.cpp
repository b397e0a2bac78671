// The Llama and BLOOM ops (RMSNorm, SwiGLU, RoPE, ALiBi attention): backward against central
// finite differences in float64, and forward against direct formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_reference.hpp"
#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"

namespace kintsugi {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_vector;
using testing::view;

class FamilyKernels : public ::testing::Test {
 protected:
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
};

TEST_F(FamilyKernels, RmsNormGradient) {
  const std::int64_t rows = 4, cols = 9;
  auto x = random_vector(rows * cols, 5, 2.0), w = random_vector(cols, 6),
       r = random_vector(rows * cols, 8);
  std::vector<double> y(rows * cols), rstd(rows);
  auto loss = [&] {
    be->rmsnorm_forward(view(x, {rows, cols}), view(w, {cols}), view(y, {rows, cols}),
                        view(rstd, {rows}), 1e-5);
    return dot(y.data(), r.data(), rows * cols);
  };
  loss();
  // Forward is x / rms(x) * w.
  for (std::int64_t i = 0; i < rows; ++i) {
    double sq = 0;
    for (std::int64_t c = 0; c < cols; ++c) sq += x[i * cols + c] * x[i * cols + c];
    const double rs = 1 / std::sqrt(sq / cols + 1e-5);
    EXPECT_NEAR(rstd[i], rs, 1e-12);
    for (std::int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(y[i * cols + c], x[i * cols + c] * rs * w[c], 1e-12);
  }
  std::vector<double> dx(rows * cols, 0.0), dw(cols);
  be->rmsnorm_backward(view(r, {rows, cols}), view(x, {rows, cols}), view(w, {cols}),
                       view(rstd, {rows}), view(dx, {rows, cols}), view(dw, {cols}), false);
  expect_gradient(loss, x.data(), rows * cols, dx.data(), "dx");
  expect_gradient(loss, w.data(), cols, dw.data(), "dw");
  // dx accumulates onto what is there (the residual gradient); dw with accumulate adds.
  std::vector<double> dx2(rows * cols, 1.0), dw2 = dw;
  be->rmsnorm_backward(view(r, {rows, cols}), view(x, {rows, cols}), view(w, {cols}),
                       view(rstd, {rows}), view(dx2, {rows, cols}), view(dw2, {cols}), true);
  for (std::int64_t i = 0; i < rows * cols; ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0, 1e-12);
  for (std::int64_t c = 0; c < cols; ++c) EXPECT_NEAR(dw2[c], 2 * dw[c], 1e-12);
}

TEST_F(FamilyKernels, SwiGluGradient) {
  const std::int64_t n = 60;
  auto g = random_vector(n, 9, 3.0), u = random_vector(n, 10), r = random_vector(n, 11);
  std::vector<double> y(n), dg(n), du(n);
  auto loss = [&] {
    be->swiglu_forward(view(g, {n}), view(u, {n}), view(y, {n}));
    return dot(y.data(), r.data(), n);
  };
  loss();
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(y[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-12);
  be->swiglu_backward(view(g, {n}), view(u, {n}), view(r, {n}), view(dg, {n}), view(du, {n}));
  expect_gradient(loss, g.data(), n, dg.data(), "dgate");
  expect_gradient(loss, u.data(), n, du.data(), "dup");
  // dgate may alias dy.
  std::vector<double> d = r;
  be->swiglu_backward(view(g, {n}), view(u, {n}), view(d, {n}), view(d, {n}), view(du, {n}));
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(d[i], dg[i], 1e-15);
}

// RoPE on a packed qkv of 2 sequences, 4 query heads around 2 kv heads.
TEST_F(FamilyKernels, RopeGradientAndLayout) {
  const AttentionShape s{.batch = 2, .seq = 5, .heads = 4, .kv_heads = 2, .head_dim = 6};
  const std::int64_t width = (4 + 2 * 2) * 6, n = 2 * 5 * width;
  auto qkv = random_vector(n, 12), r = random_vector(n, 13);
  const double theta = 100.0;
  std::vector<double> rotated;
  auto loss = [&] {
    rotated = qkv;
    be->rope(s, view(rotated, {n}), theta, false);
    return dot(rotated.data(), r.data(), n);
  };
  loss();
  // The rotate_half pairing: dims i and i + 3 of each q and k head, angle t * theta^(-2i/6);
  // values (slot 3 of each group of 4) untouched.
  for (std::int64_t row = 0; row < 10; ++row) {
    const std::int64_t t = row % 5;
    for (std::int64_t slot = 0; slot < 8; ++slot)
      for (std::int64_t i = 0; i < 3; ++i) {
        const std::int64_t at = row * width + slot * 6;
        const bool value = slot % 4 == 3;
        const double a = value ? 0.0 : t * std::pow(theta, -2.0 * i / 6);
        const double x1 = qkv[at + i], x2 = qkv[at + i + 3];
        EXPECT_NEAR(rotated[at + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-12);
        EXPECT_NEAR(rotated[at + i + 3], x2 * std::cos(a) + x1 * std::sin(a), 1e-12);
      }
  }
  // Backward is the inverse rotation of the output gradient.
  std::vector<double> d = r;
  be->rope(s, view(d, {n}), theta, true);
  expect_gradient(loss, qkv.data(), n, d.data(), "dqkv", 200);
  // Inverse undoes forward (rotated again from the unperturbed qkv).
  loss();
  std::vector<double> back = rotated;
  be->rope(s, view(back, {n}), theta, true);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[i], qkv[i], 1e-12);
}

TEST_F(FamilyKernels, AlibiSlopes) {
  // Powers of two: 2^(-8/n), 2^(-16/n), ...
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(alibi_slope(h, 8), std::pow(2.0, -(h + 1.0)));
  // Otherwise (BLOOM's build_alibi_tensor): the 8 slopes of 8 heads, then the odd powers of
  // 2^(-8/16) for the remaining heads.
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(alibi_slope(h, 12), std::pow(2.0, -(h + 1.0)));
  for (int j = 0; j < 4; ++j)
    EXPECT_DOUBLE_EQ(alibi_slope(8 + j, 12), std::pow(std::pow(2.0, -0.5), 2 * j + 1));
}

TEST_F(FamilyKernels, AlibiAttentionGradientAndReference) {
  // 2 of a model's 4 heads, as tensor-parallel rank 1 of 2 holds them (global heads 2 and 3),
  // across more than one 32-row query block.
  const AttentionShape s{.batch = 2, .seq = 40, .heads = 2, .kv_heads = 2, .head_dim = 3,
                         .alibi_heads = 4, .head_begin = 2};
  // The bias matters: without it the outputs differ.
  AttentionShape plain = s;
  plain.alibi_heads = 0;
  testing::expect_attention_matches_formula(s, plain, 14, 1e-3, 200);
}

}  // namespace
}  // namespace kintsugi
