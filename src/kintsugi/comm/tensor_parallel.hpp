#pragma once
// Tensor- and sequence-parallel communication, as Megatron-LM's four conjugate primitives
// (docs/design.md principle 4). Column- and row-parallel linear layers, the vocabulary-parallel
// embedding and the vocabulary-parallel cross-entropy use these and nothing else.
//
// A tensor-parallel region starts at a column-parallel layer (each rank computes some output
// columns from the whole input) and ends at a row-parallel one (each rank holds a partial sum of
// the whole output):
//
//                     forward                        backward
//   enter  (tp)       identity                       all-reduce          ("f")
//   leave  (tp)       all-reduce                     identity            ("g")
//   enter  (sp)       all-gather along rows          reduce-scatter
//   leave  (sp)       reduce-scatter along rows      all-gather
//
// With sequence parallelism (Korthikanti et al.) the tensors outside regions (residual stream,
// LayerNorms) are split along the token rows across the group, so "local" tensors have
// rows / tp rows; without it, local and full tensors are the same tensor. With one rank every
// mapping is the identity.
#include <cstdint>

#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

class TensorParallel {
 public:
  TensorParallel() = default;  // a single rank
  TensorParallel(Communicator& group, bool sequence_parallel);
  // Shapes only, no communication: what rank `rank` of `size` holds (planning, tests).
  static TensorParallel shape_only(int size, int rank, bool sequence_parallel);

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sequence_parallel_ && size_ > 1; }
  Communicator* group() const { return group_; }

  // Rows of this rank's slice of `rows` token rows outside regions, and where it starts.
  std::int64_t local_rows(std::int64_t rows) const;
  std::int64_t first_row(std::int64_t rows) const;
  // This rank's [begin, begin + extent) of a dimension of size n split across the group.
  std::int64_t shard_begin(std::int64_t n) const { return n / size() * rank(); }
  std::int64_t shard_extent(std::int64_t n) const { return n / size(); }

  // x_local -> x_full. Without sp, x_full must be x_local (nothing moves).
  void enter(const Tensor& x_local, const Tensor& x_full) const;
  // dx_full (partial sums) -> dx_local. Without sp, in place.
  void enter_backward(const Tensor& dx_full, const Tensor& dx_local) const;
  // y_partial (full rows, partial sums) -> y_local. Without sp, in place.
  void leave(const Tensor& y_partial, const Tensor& y_local) const;
  // dy_local -> dy_full. Without sp, dy_full must be dy_local.
  void leave_backward(const Tensor& dy_local, const Tensor& dy_full) const;
  // enter's all-gather again, started and not waited for (sequence parallelism only): backward
  // gathers a norm output that forward kept only as this rank's rows, while it computes.
  CommHandle regather_async(const Tensor& x_local, const Tensor& x_full) const;

 private:
  Communicator& comm() const;
  Communicator* group_ = nullptr;
  int size_ = 1, rank_ = 0;
  bool sequence_parallel_ = false;
};

}  // namespace kintsugi
