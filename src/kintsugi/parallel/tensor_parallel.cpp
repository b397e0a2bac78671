#include "kintsugi/parallel/tensor_parallel.hpp"

namespace kintsugi {

TensorParallel::TensorParallel(Communicator& group, bool sequence_parallel)
    : group_(group.size() > 1 ? &group : nullptr), sequence_parallel_(sequence_parallel) {}

std::int64_t TensorParallel::local_rows(std::int64_t rows) const {
  return sequence_parallel() ? rows / size() : rows;
}

std::int64_t TensorParallel::first_row(std::int64_t rows) const {
  return sequence_parallel() ? rows / size() * rank() : 0;
}

void TensorParallel::enter(const Tensor& x_local, const Tensor& x_full) const {
  if (sequence_parallel()) group_->all_gather(x_local, x_full);
  else KINTSUGI_ASSERT(x_local.data == x_full.data);
}

void TensorParallel::enter_backward(const Tensor& dx_full, const Tensor& dx_local) const {
  if (!group_) return;
  if (sequence_parallel()) {
    group_->reduce_scatter(dx_full, dx_local);
  } else {
    KINTSUGI_ASSERT(dx_full.data == dx_local.data);
    group_->all_reduce(dx_full);
  }
}

void TensorParallel::leave(const Tensor& y_partial, const Tensor& y_local) const {
  if (!group_) return;
  if (sequence_parallel()) {
    group_->reduce_scatter(y_partial, y_local);
  } else {
    KINTSUGI_ASSERT(y_partial.data == y_local.data);
    group_->all_reduce(y_partial);
  }
}

void TensorParallel::leave_backward(const Tensor& dy_local, const Tensor& dy_full) const {
  if (sequence_parallel()) group_->all_gather(dy_local, dy_full);
  else KINTSUGI_ASSERT(dy_local.data == dy_full.data);
}

}  // namespace kintsugi
