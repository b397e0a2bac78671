#pragma once
// The GEMM-efficiency curve of a cluster spec (cluster.hpp) fitted to a device's measured
// rates: with max_efficiency 1, a square GEMM of size n runs at
//   rate(n) = peak * (n / (n + h))^3
// so two measured sizes, a large n1 and a small n2, fix both h (the half dimension) and peak
// (the rate the curve approaches, above the large GEMM's). The curve passes through both
// measurements; `kintsugi tune` refits its max_efficiency to measured steps.
#include "kintsugi/plan/gemm_rate.hpp"

namespace kintsugi {

struct GemmCurve {
  double peak_gflops = 0;
  double half_dim = 0;
};

// `large` and `small`: rates of the same device and dtype at two sizes. A small GEMM as fast
// as the large one (a CPU's, often) gives h = 0; h is at most the large size (the curve is
// not meant to explain a small GEMM slower than that).
GemmCurve fit_gemm_curve(const GemmRate& large, const GemmRate& small);
// The peak of another dtype's rate, measured at its own size, on a curve of half dimension h.
double peak_on_curve(const GemmRate& rate, double half_dim);

}  // namespace kintsugi
