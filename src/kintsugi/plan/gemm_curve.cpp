#include "kintsugi/plan/gemm_curve.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

double peak_on_curve(const GemmRate& rate, double h) {
  const double n = rate.size;
  return rate.gflops * std::pow((n + h) / n, 3.0);
}

GemmCurve fit_gemm_curve(const GemmRate& large, const GemmRate& small) {
  if (!(small.size < large.size) || small.size <= 0 || !(large.gflops > 0) || !(small.gflops > 0))
    fail("the GEMM curve needs positive rates at two sizes, the second smaller ({} GFLOP/s at "
         "{}, {} GFLOP/s at {})",
         large.gflops, large.size, small.gflops, small.size);
  const double n1 = large.size, n2 = small.size;
  // (rate2 / rate1)^(1/3) = q = [n2 / (n2 + h)] / [n1 / (n1 + h)], solved for h:
  //   h = n1 n2 (1 - q) / (q n1 - n2)
  const double q = std::cbrt(small.gflops / large.gflops);
  double h = 0;
  if (q < 1) h = q * n1 > n2 ? std::min(n1, n1 * n2 * (1 - q) / (q * n1 - n2)) : n1;
  return {peak_on_curve(large, h), h};
}

}  // namespace kintsugi
