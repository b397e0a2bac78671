// Softmax cross-entropy over (possibly padded, possibly vocabulary-sharded) logits in three
// passes: row maxima, row sums of exponentials (stored in place when a gradient follows), then
// losses and the gradient written over the logits, so the largest activation of the model
// (rows x vocabulary) exists once. Padding columns never enter the softmax and get a zero
// gradient. Between the passes a vocabulary-parallel caller all-reduces the row statistics.
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/cross_entropy_rows.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu {

using ce::gradient_row;
using ce::loss_of_row;
using ce::max_of_row;
using ce::sum_exp_row;
using ce::target_of_row;

template <class T>
void softmax_row_max(const T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     T* row_max) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) row_max[r] = max_of_row(logits + r * cols, valid);
}

template <class T>
void softmax_row_sum(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     const T* row_max, const std::int32_t* targets, std::int64_t col_begin,
                     T* row_sum, T* target_logit, bool store_exp) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = logits + r * cols;
    target_logit[r] = target_of_row(row, valid, targets[r], col_begin);
    row_sum[r] = sum_exp_row(row, valid, row_max[r], store_exp);
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
    if (ce::skip_ignored(row, cols, targets[r], losses[r], backward)) continue;
    losses[r] = loss_of_row(row_max[r], row_sum[r], target_logit[r]);
    if (backward) gradient_row(row, cols, valid, row_sum[r], targets[r], col_begin, grad_scale);
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

namespace mixed {

void softmax_row_max(AnyPtr logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     AnyPtr row_max, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, valid, rows, [&](float* staged) {
    return [&, staged](std::int64_t r) {
      row_max.set(r, max_of_row(read_f32(logits.at(r * cols), valid, staged), valid));
    };
  });
}

void softmax_row_sum(AnyPtr logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     AnyPtr row_max, const std::int32_t* targets, std::int64_t col_begin,
                     AnyPtr row_sum, AnyPtr target_logit, bool store_exp, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, valid, rows, [&](float* staged) {
    return [&, staged](std::int64_t r) {
      const AnyPtr lr = logits.at(r * cols);
      float* row = out_f32(lr, valid, staged, true);
      target_logit.set(r, target_of_row(row, valid, targets[r], col_begin));
      row_sum.set(r, sum_exp_row(row, valid, row_max.get(r), store_exp));
      if (store_exp) write_back(lr, valid, row);
    };
  });
}

void cross_entropy_finish(AnyPtr logits, std::int64_t rows, std::int64_t cols,
                          std::int64_t valid, AnyPtr row_max, AnyPtr row_sum,
                          AnyPtr target_logit, const std::int32_t* targets,
                          std::int64_t col_begin, double* losses, bool backward,
                          double grad_scale, ThreadWorkspace& ws) {
  rows_with_thread_area(ws, cols, rows, [&](float* staged) {
    return [&, staged](std::int64_t r) {
      const AnyPtr lr = logits.at(r * cols);
      if (ce::skip_ignored(lr, cols, targets[r], losses[r], backward)) return;
      const float sum = row_sum.get(r);
      losses[r] = loss_of_row(row_max.get(r), sum, target_logit.get(r));
      if (!backward) return;
      float* row = out_f32(lr, cols, staged, true);
      gradient_row(row, cols, valid, sum, targets[r], col_begin, grad_scale);
      write_back(lr, cols, row);
    };
  });
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_softmax_row_max(const Tensor& logits, std::int64_t valid,
                                    const Tensor& row_max) {
  const Kind kind = kind_of({&logits, &row_max});
  if (kind == Kind::mixed)
    return cpu::mixed::softmax_row_max(AnyPtr(logits), rows_of(logits), cols_of(logits), valid,
                                       AnyPtr(row_max), workspace_);
  typed(kind, [&]<class T>() {
    cpu::softmax_row_max(logits.as<T>(), rows_of(logits), cols_of(logits), valid, row_max.as<T>());
  });
}

void CpuBackend::do_softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                                    const Tensor& target_ids, std::int64_t col_begin,
                                    const Tensor& row_sum, const Tensor& target_logit,
                                    bool store_exp) {
  const std::int32_t* targets = ids(target_ids);
  const Kind kind = kind_of({&logits, &row_max, &row_sum, &target_logit});
  if (kind == Kind::mixed)
    return cpu::mixed::softmax_row_sum(AnyPtr(logits), rows_of(logits), cols_of(logits), valid,
                                       AnyPtr(row_max), targets, col_begin, AnyPtr(row_sum),
                                       AnyPtr(target_logit), store_exp, workspace_);
  typed(kind, [&]<class T>() {
    cpu::softmax_row_sum(logits.as<T>(), rows_of(logits), cols_of(logits), valid, row_max.as<T>(),
                         targets, col_begin, row_sum.as<T>(), target_logit.as<T>(), store_exp);
  });
}

void CpuBackend::do_cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                         const Tensor& row_max, const Tensor& row_sum,
                                         const Tensor& target_logit, const Tensor& target_ids,
                                         std::int64_t col_begin, const Tensor& loss_sum,
                                         bool backward, double grad_scale) {
  const std::int64_t rows = rows_of(logits);
  const std::int32_t* targets = ids(target_ids);
  double* losses = losses_.get_as<double>(static_cast<std::size_t>(rows));
  const Kind kind = kind_of({&logits, &row_max, &row_sum, &target_logit});
  if (kind == Kind::mixed) {
    cpu::mixed::cross_entropy_finish(AnyPtr(logits), rows, cols_of(logits), valid, AnyPtr(row_max),
                                     AnyPtr(row_sum), AnyPtr(target_logit), targets, col_begin,
                                     losses, backward, grad_scale, workspace_);
  } else {
    typed(kind, [&]<class T>() {
      cpu::cross_entropy_finish(logits.as<T>(), rows, cols_of(logits), valid, row_max.as<T>(),
                                row_sum.as<T>(), target_logit.as<T>(), targets, col_begin, losses,
                                backward, grad_scale);
    });
  }
  double sum = 0;
  for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
  add_to_scalar(loss_sum, sum);
}

}  // namespace kintsugi::cpu
