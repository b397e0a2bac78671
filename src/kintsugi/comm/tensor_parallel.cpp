#include "kintsugi/comm/tensor_parallel.hpp"

namespace kintsugi {

TensorParallel::TensorParallel(Communicator& group, bool sequence_parallel)
    : group_(group.size() > 1 ? &group : nullptr),
      size_(group.size()),
      rank_(group.rank()),
      sequence_parallel_(sequence_parallel) {}

TensorParallel TensorParallel::shape_only(int size, int rank, bool sequence_parallel) {
  TensorParallel tp;
  tp.size_ = size;
  tp.rank_ = rank;
  tp.sequence_parallel_ = sequence_parallel;
  return tp;
}

std::int64_t TensorParallel::local_rows(std::int64_t rows) const {
  return sequence_parallel() ? rows / size() : rows;
}

std::int64_t TensorParallel::first_row(std::int64_t rows) const {
  return sequence_parallel() ? rows / size() * rank() : 0;
}

Communicator& TensorParallel::comm() const {
  KINTSUGI_ASSERT(group_ != nullptr);  // a shape_only() instance cannot communicate
  return *group_;
}

void TensorParallel::enter(const Tensor& x_local, const Tensor& x_full) const {
  if (sequence_parallel()) comm().all_gather(x_local, x_full);
  else KINTSUGI_ASSERT(x_local.data == x_full.data);
}

// The conjugates (the table in tensor_parallel.hpp): enter's backward is leave's forward.
void TensorParallel::enter_backward(const Tensor& dx_full, const Tensor& dx_local) const {
  leave(dx_full, dx_local);
}

void TensorParallel::leave(const Tensor& y_partial, const Tensor& y_local) const {
  if (size_ == 1) return;
  if (sequence_parallel()) {
    comm().reduce_scatter(y_partial, y_local);
  } else {
    KINTSUGI_ASSERT(y_partial.data == y_local.data);
    comm().all_reduce(y_partial);
  }
}

CommHandle TensorParallel::regather_async(const Tensor& x_local, const Tensor& x_full) const {
  KINTSUGI_ASSERT(sequence_parallel());
  return comm().all_gather_async(x_local, x_full);
}

// And leave's backward is enter's forward.
void TensorParallel::leave_backward(const Tensor& dy_local, const Tensor& dy_full) const {
  enter(dy_local, dy_full);
}

}  // namespace kintsugi
