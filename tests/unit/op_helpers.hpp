#pragma once
// Small adapters for tests that call backend ops on host vectors.
#include <cstdint>
#include <vector>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi::testing {

// An i32 tensor over token ids or targets.
inline Tensor ids(const std::vector<std::int32_t>& v) {
  return Tensor{const_cast<std::int32_t*>(v.data()), DType::i32,
                Shape{static_cast<std::int64_t>(v.size())}};
}

// The backend's sum of squares of x, as a host double.
inline double sum_squares(Backend& b, const Tensor& x) {
  double sum = 0;
  b.sum_squares(x, Tensor{&sum, DType::f64, Shape{1}});
  return sum;
}

// cross_entropy_finish one row at a time, so a test sees each row's loss in losses[r].
inline void cross_entropy_rows(Backend& b, const Tensor& logits, std::int64_t valid,
                               const Tensor& row_max, const Tensor& row_sum,
                               const Tensor& target_logit, const Tensor& targets,
                               std::int64_t col_begin, double* losses, bool backward,
                               double grad_scale) {
  for (std::int64_t r = 0; r < row_max.numel(); ++r) {
    losses[r] = 0;
    b.cross_entropy_finish(logits.rows(r, 1), valid, row_max.rows(r, 1), row_sum.rows(r, 1),
                           target_logit.rows(r, 1), targets.rows(r, 1), col_begin,
                           Tensor{&losses[r], DType::f64, Shape{1}}, backward, grad_scale);
  }
}

}  // namespace kintsugi::testing
