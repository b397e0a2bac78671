// The loss's entry points (backend.hpp): the three softmax cross-entropy passes and the fused op
// check their shapes and count their bytes once, then run the device backend's implementation.
// Every one is counted as "cross_entropy", so profiles of either path compare row for row.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
// Targets: i32, one per row at least.
void check_targets(const Tensor& targets, std::int64_t rows) {
  KINTSUGI_ASSERT(targets.dtype == DType::i32 && targets.numel() >= rows);
}
// The row statistics of the three passes: one value per row of the logits.
void check_rows(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                const Tensor& row_sum, const Tensor& target_logit) {
  const std::int64_t n = rows(logits);
  KINTSUGI_ASSERT(valid <= cols(logits) && row_max.numel() == n && row_sum.numel() == n &&
                  target_logit.numel() == n);
}
void check_loss_sum(const Tensor& loss_sum) {
  KINTSUGI_ASSERT(loss_sum.dtype == DType::f64 && loss_sum.numel() == 1);
}
// The cross-entropy passes read the valid columns of the logits only.
double valid_bytes(const Tensor& logits, std::int64_t valid) {
  return bytes(logits, rows(logits) * valid);
}
}  // namespace

void Backend::softmax_row_max(const Tensor& logits, std::int64_t valid, const Tensor& row_max) {
  KINTSUGI_ASSERT(valid <= cols(logits) && row_max.numel() == rows(logits));
  const double moved = valid_bytes(logits, valid) + bytes(row_max);
  dispatch(op_call("cross_entropy", 0, moved, logits),
           [&] { device_.do_softmax_row_max(logits, valid, row_max); });
}

void Backend::softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                              const Tensor& targets, std::int64_t col_begin,
                              const Tensor& row_sum, const Tensor& target_logit,
                              bool store_exp) {
  check_rows(logits, valid, row_max, row_sum, target_logit);
  check_targets(targets, rows(logits));
  const double moved = valid_bytes(logits, valid) * (store_exp ? 2 : 1) + bytes(row_max) +
                       bytes(targets) + bytes(row_sum) + bytes(target_logit);
  dispatch(op_call("cross_entropy", 0, moved, logits), [&] {
    device_.do_softmax_row_sum(logits, valid, row_max, targets, col_begin, row_sum, target_logit,
                               store_exp);
  });
}

void Backend::cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                   const Tensor& row_max, const Tensor& row_sum,
                                   const Tensor& target_logit, const Tensor& targets,
                                   std::int64_t col_begin, const Tensor& loss_sum, bool backward,
                                   double grad_scale) {
  check_rows(logits, valid, row_max, row_sum, target_logit);
  check_targets(targets, rows(logits));
  check_loss_sum(loss_sum);
  // Backward reads the valid columns and writes every column (padding becomes 0).
  const double moved = bytes(row_max) + bytes(row_sum) + bytes(target_logit) + bytes(targets) +
                       2 * bytes(loss_sum) +
                       (backward ? valid_bytes(logits, valid) + bytes(logits) : 0);
  dispatch(op_call("cross_entropy", 0, moved, logits), [&] {
    device_.do_cross_entropy_finish(logits, valid, row_max, row_sum, target_logit, targets,
                                    col_begin, loss_sum, backward, grad_scale);
  });
}

void Backend::cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                                  const Tensor& targets, const Tensor& loss_sum, bool backward,
                                  double grad_scale) {
  KINTSUGI_ASSERT(valid <= cols(logits));
  check_targets(targets, rows(logits));
  check_loss_sum(loss_sum);
  // One read of the valid columns; backward writes every column (padding becomes 0).
  const double moved = valid_bytes(logits, valid) + bytes(targets) + 2 * bytes(loss_sum) +
                       (backward ? bytes(logits) : 0);
  dispatch(op_call("cross_entropy", 0, moved, logits), [&] {
    device_.do_cross_entropy_fused(logits, valid, targets, loss_sum, backward, grad_scale);
  });
}

}  // namespace kintsugi
