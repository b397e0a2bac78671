#pragma once
// Row bodies of the softmax cross-entropy, shared by the three-pass kernels (cross_entropy.cpp)
// and the fused one (cross_entropy_fused.cpp), typed or on rows staged in f32: both compute a
// row's statistics, loss and gradient with the very same code, so for f32 and f64 logits the
// fused op gives the three passes' bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/staging.hpp"

namespace kintsugi::cpu::ce {

template <class T>
inline T max_of_row(const T* row, std::int64_t valid) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < valid; ++j) mx = std::max(mx, row[j]);
  return mx;
}

template <class T>
inline T target_of_row(const T* row, std::int64_t valid, std::int32_t target,
                       std::int64_t col_begin) {
  const std::int64_t t = target - col_begin;
  return target >= 0 && t >= 0 && t < valid ? row[t] : T(0);
}

template <class T>
inline T sum_exp_row(T* row, std::int64_t valid, T mx, bool store_exp) {
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
  return sum;
}

template <class T>
inline double loss_of_row(T mx, T sum, T target_logit) {
  return static_cast<double>(std::log(sum) + mx - target_logit);
}

// After store_exp: the row becomes grad_scale * (softmax - onehot), padding 0.
template <class T>
inline void gradient_row(T* row, std::int64_t cols, std::int64_t valid, T sum,
                         std::int32_t target, std::int64_t col_begin, double grad_scale) {
  const T factor = static_cast<T>(grad_scale) / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < valid; ++j) row[j] *= factor;
  const std::int64_t t = target - col_begin;
  if (t >= 0 && t < valid) row[t] -= static_cast<T>(grad_scale);
  std::fill(row + valid, row + cols, T(0));
}

// A position whose target is ignored (negative) has loss 0 and, with backward, a zero gradient
// row, padding included; true when the row is one, so the caller moves on.
template <class T>
inline bool skip_ignored(T* row, std::int64_t cols, std::int32_t target, double& loss,
                         bool backward) {
  if (target >= 0) return false;
  loss = 0;
  if (backward) std::fill(row, row + cols, T(0));
  return true;
}

inline bool skip_ignored(AnyPtr row, std::int64_t cols, std::int32_t target, double& loss,
                         bool backward) {
  if (target >= 0) return false;
  loss = 0;
  if (backward) std::memset(row.data, 0, cols * size_of(row.dtype));
  return true;
}

}  // namespace kintsugi::cpu::ce
