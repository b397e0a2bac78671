// Softmax cross-entropy in one op (Backend::cross_entropy_fused): each thread takes whole rows
// and runs the three passes' row bodies (cross_entropy_rows.hpp) on a row while it sits in its
// cache, so the logits cross memory once each way. f32 and f64 rows are worked in place, giving
// the three passes' bits; bf16/f16 rows are widened into f32 scratch and rounded once at the end
// (the three passes round the exponentials to the logits' type in between).
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/cross_entropy_rows.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu {

namespace {

// One row worked in place (f32 or f64; or a row staged in f32): its loss, and with backward the
// row becomes the gradient.
template <class T>
double fused_row(T* row, std::int64_t cols, std::int64_t valid, std::int32_t target,
                 bool backward, double grad_scale) {
  const T mx = ce::max_of_row(row, valid);
  const T target_logit = ce::target_of_row(row, valid, target, 0);
  const T sum = ce::sum_exp_row(row, valid, mx, backward);
  if (backward) ce::gradient_row(row, cols, valid, sum, target, 0, grad_scale);
  return ce::loss_of_row(mx, sum, target_logit);
}

}  // namespace

// Backend::cross_entropy_fused; losses[r] receives row r's loss.
template <class T>
void cross_entropy_fused(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                         const std::int32_t* targets, double* losses, bool backward,
                         double grad_scale) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = logits + r * cols;
    if (ce::skip_ignored(row, cols, targets[r], losses[r], backward)) continue;
    losses[r] = fused_row(row, cols, valid, targets[r], backward, grad_scale);
  }
}

template void cross_entropy_fused<float>(float*, std::int64_t, std::int64_t, std::int64_t,
                                         const std::int32_t*, double*, bool, double);
template void cross_entropy_fused<double>(double*, std::int64_t, std::int64_t, std::int64_t,
                                          const std::int32_t*, double*, bool, double);

namespace mixed {

void cross_entropy_fused(AnyPtr logits, std::int64_t rows, std::int64_t cols,
                         std::int64_t valid, const std::int32_t* targets, double* losses,
                         bool backward, double grad_scale, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, cols, rows, [&](float* staged) {
    return [&, staged](std::int64_t r) {
      const AnyPtr lr = logits.at(r * cols);
      if (ce::skip_ignored(lr, cols, targets[r], losses[r], backward)) return;
      // Forward only reads the real columns; backward rewrites the padding too.
      const std::int64_t n = backward ? cols : valid;
      float* row = out_f32(lr, n, staged, true);
      losses[r] = fused_row(row, cols, valid, targets[r], backward, grad_scale);
      if (backward) write_back(lr, cols, row);
    };
  });
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                                        const Tensor& target_ids, const Tensor& loss_sum,
                                        bool backward, double grad_scale) {
  const std::int64_t rows = rows_of(logits), cols = cols_of(logits);
  const std::int32_t* targets = ids(target_ids);
  double* losses = losses_.get_as<double>(static_cast<std::size_t>(rows));
  const Kind kind = kind_of({&logits});
  if (kind == Kind::mixed)
    cpu::mixed::cross_entropy_fused(AnyPtr(logits), rows, cols, valid, targets, losses, backward,
                                    grad_scale, workspace_);
  else
    typed(kind, [&]<class T>() {
      cpu::cross_entropy_fused(logits.as<T>(), rows, cols, valid, targets, losses, backward,
                               grad_scale);
    });
  double sum = 0;  // in row order, as cross_entropy_finish
  for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
  add_to_scalar(loss_sum, sum);
}

}  // namespace kintsugi::cpu
