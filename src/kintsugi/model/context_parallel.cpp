#include "kintsugi/model/context_parallel.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

// A flat scratch buffer as [rows, cols] (its first rows * cols elements).
Tensor as_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  KINTSUGI_ASSERT(t.numel() >= rows * cols);
  return t.reshaped({t.numel()}).rows(0, rows * cols).reshaped({rows, cols});
}

}  // namespace

// The all-to-all's blocks are in rank order: block r of `send` goes to rank r and block r of
// `recv` came from it. Both buffers are [size][batch * local_seq][part].
void ContextParallel::to_heads(Backend& be, const Tensor& local, const Tensor& heads,
                               std::int64_t batch, const Tensor& send, const Tensor& recv) const {
  const std::int64_t rows = local.shape[0], width = local.shape[1];
  const std::int64_t part = width / size_, local_seq = rows / batch, seq = local_seq * size_;
  KINTSUGI_ASSERT(group_ && width % size_ == 0 && rows % batch == 0 &&
                  heads.numel() == rows * width);
  const Tensor out = heads.reshaped({batch * seq, part});
  const Tensor s = as_matrix(send, size_ * rows, part), r = as_matrix(recv, size_ * rows, part);
  // Rank j gets column block j of every row this rank holds.
  for (int j = 0; j < size_; ++j) be.copy_columns(local, j * part, s.rows(j * rows, rows), 0, part);
  group_->all_to_all(s, r);
  // Rank i's rows are positions [i local_seq, (i + 1) local_seq) of each sequence.
  for (int i = 0; i < size_; ++i)
    for (std::int64_t b = 0; b < batch; ++b)
      be.copy(r.rows(i * rows + b * local_seq, local_seq),
              out.rows(b * seq + i * local_seq, local_seq));
}

void ContextParallel::to_rows(Backend& be, const Tensor& heads, const Tensor& local,
                              std::int64_t batch, const Tensor& send, const Tensor& recv) const {
  const std::int64_t rows = local.shape[0], width = local.shape[1];
  const std::int64_t part = width / size_, local_seq = rows / batch, seq = local_seq * size_;
  KINTSUGI_ASSERT(group_ && width % size_ == 0 && rows % batch == 0 &&
                  heads.numel() == rows * width);
  const Tensor in = heads.reshaped({batch * seq, part});
  const Tensor s = as_matrix(send, size_ * rows, part), r = as_matrix(recv, size_ * rows, part);
  // Rank j gets its own rows of this rank's columns.
  for (int j = 0; j < size_; ++j)
    for (std::int64_t b = 0; b < batch; ++b)
      be.copy(in.rows(b * seq + j * local_seq, local_seq),
              s.rows(j * rows + b * local_seq, local_seq));
  group_->all_to_all(s, r);
  // Rank i sent column block i.
  for (int i = 0; i < size_; ++i) be.copy_columns(r.rows(i * rows, rows), 0, local, i * part, part);
}

}  // namespace kintsugi
