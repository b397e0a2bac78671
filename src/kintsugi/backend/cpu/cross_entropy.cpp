// Softmax cross-entropy over (possibly padded, possibly vocabulary-sharded) logits in three
// passes: row maxima, row sums of exponentials (stored in place when a gradient follows), then
// losses and the gradient written over the logits, so the largest activation of the model
// (rows x vocabulary) exists once. Padding columns never enter the softmax and get a zero
// gradient. Between the passes a vocabulary-parallel caller all-reduces the row statistics.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"

namespace kintsugi::cpu {

template <class T>
void softmax_row_max(const T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     T* row_max) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < valid; ++j) mx = std::max(mx, row[j]);
    row_max[r] = mx;
  }
}

template <class T>
void softmax_row_sum(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     const T* row_max, const std::int32_t* targets, std::int64_t col_begin,
                     T* row_sum, T* target_logit, bool store_exp) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = logits + r * cols;
    const std::int64_t t = targets[r] - col_begin;
    target_logit[r] = targets[r] >= 0 && t >= 0 && t < valid ? row[t] : T(0);
    const T mx = row_max[r];
    T sum = 0;
    if (store_exp) {
#pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < valid; ++j) {
        row[j] = exp_fast(row[j] - mx);
        sum += row[j];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < valid; ++j) sum += exp_fast(row[j] - mx);
    }
    row_sum[r] = sum;
  }
}

template <class T>
void cross_entropy_finish(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                          const T* row_max, const T* row_sum, const T* target_logit,
                          const std::int32_t* targets, std::int64_t col_begin, double* losses,
                          bool backward, double grad_scale) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = logits + r * cols;
    if (targets[r] < 0) {  // ignored position
      losses[r] = 0;
      if (backward) std::fill(row, row + cols, T(0));
      continue;
    }
    losses[r] = static_cast<double>(std::log(row_sum[r]) + row_max[r] - target_logit[r]);
    if (!backward) continue;
    const T factor = static_cast<T>(grad_scale) / row_sum[r];
#pragma omp simd
    for (std::int64_t j = 0; j < valid; ++j) row[j] *= factor;
    const std::int64_t t = targets[r] - col_begin;
    if (t >= 0 && t < valid) row[t] -= static_cast<T>(grad_scale);
    std::fill(row + valid, row + cols, T(0));
  }
}

#define KINTSUGI_INSTANTIATE(T)                                                                 \
  template void softmax_row_max<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T*);     \
  template void softmax_row_sum<T>(T*, std::int64_t, std::int64_t, std::int64_t, const T*,      \
                                   const std::int32_t*, std::int64_t, T*, T*, bool);            \
  template void cross_entropy_finish<T>(T*, std::int64_t, std::int64_t, std::int64_t, const T*, \
                                        const T*, const T*, const std::int32_t*, std::int64_t,  \
                                        double*, bool, double);
KINTSUGI_INSTANTIATE(float)
KINTSUGI_INSTANTIATE(double)
#undef KINTSUGI_INSTANTIATE

}  // namespace kintsugi::cpu
