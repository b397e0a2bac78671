#pragma once
// Finite-difference gradient checking in float64: the kernels under test run in double, so a
// central difference with h = 1e-6 agrees with a correct analytic gradient to ~1e-8 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "kintsugi/core/tensor.hpp"

namespace kintsugi::testing {

inline std::vector<double> random_vector(std::int64_t n, std::uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for up to `samples`
// indices spread over x (all of them when x is small).
inline void expect_gradient(const std::function<double()>& loss, double* x, std::int64_t n,
                            const double* analytic, const char* what, int samples = 64,
                            double tolerance = 1e-6) {
  const double h = 1e-6;
  const std::int64_t step = std::max<std::int64_t>(1, n / samples);
  double worst = 0;
  for (std::int64_t i = 0; i < n; i += step) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, err);
    EXPECT_LT(err, tolerance) << what << "[" << i << "]: numeric " << numeric << " analytic "
                              << analytic[i];
  }
  SUCCEED() << what << ": worst relative error " << worst;
}

// A float64 tensor over a test's values (the kernels run on it in double precision).
inline Tensor view(std::vector<double>& v, Shape s) {
  EXPECT_EQ(static_cast<std::int64_t>(v.size()), s.numel());
  return Tensor{v.data(), DType::f64, s};
}

inline double dot(const double* a, const double* b, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace kintsugi::testing
