// Softmax cross-entropy over (possibly padded) logits, fused with its backward: the gradient
// overwrites the logits in place, so the largest activation of the model (rows x vocabulary)
// exists once. Padded columns never enter the softmax and get a zero gradient.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu {

template <class T>
void cross_entropy(T* logits, const std::int32_t* targets, std::int64_t rows,
                   std::int64_t padded_vocab, std::int64_t vocab, double* losses, bool backward,
                   double grad_scale) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = logits + r * padded_vocab;
    const std::int32_t target = targets[r];
    if (target < 0) {  // ignored position
      losses[r] = 0;
      if (backward) std::fill(row, row + padded_vocab, T(0));
      continue;
    }
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < vocab; ++j) mx = std::max(mx, row[j]);
    const T target_logit = row[target];
    T sum = 0;
    if (backward) {
#pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < vocab; ++j) {
        row[j] = exp_fast(row[j] - mx);
        sum += row[j];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < vocab; ++j) sum += exp_fast(row[j] - mx);
    }
    const T lse = mx + std::log(sum);
    losses[r] = static_cast<double>(lse - target_logit);
    if (!backward) continue;
    const T factor = static_cast<T>(grad_scale) / sum;
#pragma omp simd
    for (std::int64_t j = 0; j < vocab; ++j) row[j] *= factor;
    row[target] -= static_cast<T>(grad_scale);
    std::fill(row + vocab, row + padded_vocab, T(0));
  }
}

template void cross_entropy<float>(float*, const std::int32_t*, std::int64_t, std::int64_t,
                                   std::int64_t, double*, bool, double);
template void cross_entropy<double>(double*, const std::int32_t*, std::int64_t, std::int64_t,
                                    std::int64_t, double*, bool, double);

}  // namespace kintsugi::cpu
