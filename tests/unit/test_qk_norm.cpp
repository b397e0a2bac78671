// Qwen3's per-head norm of the queries and keys (Backend::qk_norm_forward/backward,
// backend/cpu/qk_norm.cpp): the CPU kernel against its formula and finite differences in f64,
// values left alone, and bf16 against f32.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/core/memory.hpp"

namespace kintsugi {
namespace {

// 2 sequences of 3 rows, 4 query heads over 2 kv heads of 6 elements: a row is
// [q q k v][q q k v].
const AttentionShape kShape{2, 3, 4, 2, 6};
constexpr std::int64_t kRows = 6, kWidth = 8 * 6, kStats = 6;

std::vector<double> values(std::int64_t n, double scale, double offset) {
  std::vector<double> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = offset + scale * std::sin(0.7 * i + 0.3);
  return v;
}
Tensor f64(std::vector<double>& v, Shape s) { return Tensor{v.data(), DType::f64, s}; }

// L = sum(g * qk_norm(x)) with the formula written out.
double loss(const std::vector<double>& x, const std::vector<double>& wq,
            const std::vector<double>& wk, const std::vector<double>& g) {
  double total = 0;
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t slot = 0; slot < 8; ++slot) {
      const std::int64_t at = r * kWidth + slot * 6;
      if (slot % 4 == 3) {  // a value: passes through
        for (int c = 0; c < 6; ++c) total += g[at + c] * x[at + c];
        continue;
      }
      const std::vector<double>& w = slot % 4 == 2 ? wk : wq;
      double sq = 0;
      for (int c = 0; c < 6; ++c) sq += x[at + c] * x[at + c];
      const double rs = 1 / std::sqrt(sq / 6 + 1e-5);
      for (int c = 0; c < 6; ++c) total += g[at + c] * x[at + c] * rs * w[c];
    }
  return total;
}

TEST(QkNorm, MatchesTheFormulaAndFiniteDifferencesInF64) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  std::vector<double> x = values(kRows * kWidth, 2.0, 0.1), wq = values(6, 0.5, 1.0),
                      wk = values(6, -0.3, 0.8), g = values(kRows * kWidth, 1.0, -0.2);
  std::vector<double> y = x, rstd(kRows * kStats);
  be->qk_norm_forward(kShape, f64(y, {kRows, kWidth}), f64(wq, {6}), f64(wk, {6}),
                      f64(rstd, {kRows, kStats}), 1e-5);
  double from_kernel = 0;
  for (std::size_t i = 0; i < y.size(); ++i) from_kernel += g[i] * y[i];
  EXPECT_NEAR(from_kernel, loss(x, wq, wk, g), 1e-12);
  for (std::int64_t i = 3 * 6; i < 4 * 6; ++i) EXPECT_EQ(y[i], x[i]);  // row 0's first value
  // Row 1's key of kv head 1 is its stats column 5.
  double sq = 0;
  for (int c = 0; c < 6; ++c) sq += x[kWidth + 6 * 6 + c] * x[kWidth + 6 * 6 + c];
  EXPECT_NEAR(rstd[kStats + 5], 1 / std::sqrt(sq / 6 + 1e-5), 1e-15);

  // Backward: d_qkv holds g (the values' gradient must stay g), the weights' gradients
  // accumulate onto 0.25.
  std::vector<double> d = g, dwq(6, 0.25), dwk(6, 0.25);
  be->qk_norm_backward(kShape, f64(x, {kRows, kWidth}), f64(wq, {6}), f64(wk, {6}),
                       f64(rstd, {kRows, kStats}), f64(d, {kRows, kWidth}), f64(dwq, {6}),
                       f64(dwk, {6}));
  const double h = 1e-6;
  auto numeric = [&](std::vector<double>& v, std::size_t i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = loss(x, wq, wk, g);
    v[i] = keep - h;
    const double down = loss(x, wq, wk, g);
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(d[i], numeric(x, i), 1e-7) << i;
  for (std::size_t c = 0; c < 6; ++c) {
    EXPECT_NEAR(dwq[c] - 0.25, numeric(wq, c), 1e-7) << c;
    EXPECT_NEAR(dwk[c] - 0.25, numeric(wk, c), 1e-7) << c;
  }
}

TEST(QkNorm, Bf16FollowsF32) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  auto to_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  // Inputs representable in bf16, so both runs start from the same numbers.
  auto rounded = [](std::vector<double> v) {
    for (double& e : v) e = bf16_to_float(float_to_bf16(static_cast<float>(e)));
    return v;
  };
  const std::vector<double> x = rounded(values(kRows * kWidth, 2.0, 0.1)),
                            wq = rounded(values(6, 0.5, 1.0)), wk = rounded(values(6, -0.3, 0.8)),
                            g = rounded(values(kRows * kWidth, 1.0, -0.2));
  std::vector<float> y = to_f32(x), pre = to_f32(x), q = to_f32(wq), k = to_f32(wk),
                     rstd(kRows * kStats), d = to_f32(g), dq(6), dk(6);
  auto f32 = [](std::vector<float>& v, Shape s) { return Tensor{v.data(), DType::f32, s}; };
  be->qk_norm_forward(kShape, f32(y, {kRows, kWidth}), f32(q, {6}), f32(k, {6}),
                      f32(rstd, {kRows, kStats}), 1e-5);
  be->qk_norm_backward(kShape, f32(pre, {kRows, kWidth}), f32(q, {6}), f32(k, {6}),
                       f32(rstd, {kRows, kStats}), f32(d, {kRows, kWidth}), f32(dq, {6}),
                       f32(dk, {6}));
  auto to_bf16 = [](const std::vector<double>& v) {
    std::vector<std::uint16_t> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(static_cast<float>(v[i]));
    return out;
  };
  std::vector<std::uint16_t> yb = to_bf16(x), preb = to_bf16(x), qb = to_bf16(wq),
                             kb = to_bf16(wk), db = to_bf16(g);
  std::vector<float> rstd_b(kRows * kStats), dqb(6), dkb(6);
  auto bf = [](std::vector<std::uint16_t>& v, Shape s) { return Tensor{v.data(), DType::bf16, s}; };
  be->qk_norm_forward(kShape, bf(yb, {kRows, kWidth}), bf(qb, {6}), bf(kb, {6}),
                      f32(rstd_b, {kRows, kStats}), 1e-5);
  be->qk_norm_backward(kShape, bf(preb, {kRows, kWidth}), bf(qb, {6}), bf(kb, {6}),
                       f32(rstd_b, {kRows, kStats}), bf(db, {kRows, kWidth}), f32(dqb, {6}),
                       f32(dkb, {6}));
  // The f32 arithmetic is the same; bf16 rounds each output once (8 bits of mantissa).
  for (std::size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(bf16_to_float(yb[i]), y[i], 1e-2 * std::abs(y[i]) + 1e-6) << i;
    EXPECT_NEAR(bf16_to_float(db[i]), d[i], 1e-2 * std::abs(d[i]) + 1e-6) << i;
  }
  for (std::size_t i = 0; i < rstd.size(); ++i) EXPECT_FLOAT_EQ(rstd_b[i], rstd[i]);
  for (int c = 0; c < 6; ++c) {
    EXPECT_FLOAT_EQ(dqb[c], dq[c]);
    EXPECT_FLOAT_EQ(dkb[c], dk[c]);
  }
}

}  // namespace
}  // namespace kintsugi
