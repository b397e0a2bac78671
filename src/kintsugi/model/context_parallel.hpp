#pragma once
// Context parallelism (docs/parallelism.md, "Context parallelism"): every sequence of a
// micro-batch is split over the group, each rank holding a contiguous 1/cp of its rows through
// every layer but attention. Attention needs every earlier row, so around it the ranks
// exchange: with all_to_all (DeepSpeed's Ulysses) each rank trades its rows of all its heads
// for all rows of 1/cp of its heads, attends over whole sequences, and trades back. Every
// other layer works on rows and needs nothing from other ranks; the weights are the same on
// every rank and their gradients are summed over dp x cp (train/place.hpp).
//
// With one rank every mapping is the identity and no one calls the exchanges.
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/comm/communicator.hpp"

namespace kintsugi {

class ContextParallel {
 public:
  ContextParallel() = default;  // one rank: whole sequences
  explicit ContextParallel(Communicator& group)
      : group_(&group), size_(group.size()), rank_(group.rank()) {}

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool active() const { return size_ > 1; }
  Communicator* group() const { return group_; }

  // The rows of each sequence of `seq` this rank holds: [first_position, + local_seq).
  std::int64_t local_seq(std::int64_t seq) const { return seq / size_; }
  std::int64_t first_position(std::int64_t seq) const { return seq / size_ * rank_; }

  // Ulysses. `local`: [batch * local_seq, width], this rank's rows of each sequence, all of
  // its columns (heads); `heads`: [batch * seq, width / size] (any 2-D shape of that many
  // elements), every row, the rank's 1/size of the columns, column block r going to rank r.
  // `send` and `recv` are scratch of local's size. Columns are split in size() equal blocks,
  // so a block is whole heads when heads (for packed qkv: kv heads with their groups) divide
  // by size (parallel/layout_rules.cpp checks).
  void to_heads(Backend& be, const Tensor& local, const Tensor& heads, std::int64_t batch,
                const Tensor& send, const Tensor& recv) const;
  // The inverse: `heads` back to this rank's rows of every column.
  void to_rows(Backend& be, const Tensor& heads, const Tensor& local, std::int64_t batch,
               const Tensor& send, const Tensor& recv) const;

 private:
  Communicator* group_ = nullptr;
  int size_ = 1, rank_ = 0;
};

}  // namespace kintsugi
