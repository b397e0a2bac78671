#include "kintsugi/model/context_parallel.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

// One exchange's shapes: `local` is [batch * local_seq, width]; the all-to-all's buffers are
// [size][batch * local_seq][part], block r going to (or coming from) rank r, and the head
// split is [batch * seq, part].
struct Blocks {
  std::int64_t rows, part, local_seq, seq;
  Tensor send, recv, heads;
};

Blocks blocks(const Tensor& local, const Tensor& heads, std::int64_t batch, const Tensor& send,
              const Tensor& recv, int size) {
  const std::int64_t rows = local.shape[0], width = local.shape[1];
  KINTSUGI_ASSERT(width % size == 0 && rows % batch == 0 && heads.numel() == rows * width);
  const std::int64_t part = width / size, local_seq = rows / batch;
  auto matrix = [&](const Tensor& t) {  // a flat scratch buffer's first size * rows * part
    KINTSUGI_ASSERT(t.numel() >= size * rows * part);
    return t.reshaped({t.numel()}).rows(0, size * rows * part).reshaped({size * rows, part});
  };
  return {rows, part, local_seq, local_seq * size, matrix(send), matrix(recv),
          heads.reshaped({batch * local_seq * size, part})};
}

}  // namespace

ContextParallel::RowMap ContextParallel::contiguous_rows(int size, int rank, std::int64_t seq) {
  return {.chunk = seq / size, .first = {seq / size * rank}};
}

ContextParallel::RowMap ContextParallel::ring_rows(int size, int rank, std::int64_t seq,
                                                   int windows) {
  const std::int64_t chunk = seq / (2 * size * windows);
  RowMap map{.chunk = chunk, .first = {}};
  for (int w = 0; w < windows; ++w) {
    const std::int64_t base = w * 2 * size * chunk;
    map.first.push_back(base + chunk * rank);
    map.first.push_back(base + chunk * (2 * size - 1 - rank));
  }
  return map;
}

int ContextParallel::ring_windows(std::int64_t seq, int size, bool documents) {
  int windows = 1;
  if (!documents || size <= 1) return windows;
  for (int w = 2; w <= kRingWindowsMax; w *= 2)
    if (seq % (2 * size * w) == 0 && seq / (2 * size * w) >= kRingChunkMin) windows = w;
  return windows;
}

void ContextParallel::to_heads(Backend& be, const Tensor& local, const Tensor& heads,
                               std::int64_t batch, const Tensor& send, const Tensor& recv) const {
  KINTSUGI_ASSERT(group_);
  const Blocks x = blocks(local, heads, batch, send, recv, size_);
  // Rank j gets column block j of every row this rank holds.
  for (int j = 0; j < size_; ++j)
    be.copy_columns(local, j * x.part, x.send.rows(j * x.rows, x.rows), 0, x.part);
  group_->all_to_all(x.send, x.recv);
  // Rank i's rows are positions [i local_seq, (i + 1) local_seq) of each sequence.
  for (int i = 0; i < size_; ++i)
    for (std::int64_t b = 0; b < batch; ++b)
      be.copy(x.recv.rows(i * x.rows + b * x.local_seq, x.local_seq),
              x.heads.rows(b * x.seq + i * x.local_seq, x.local_seq));
}

void ContextParallel::to_rows(Backend& be, const Tensor& heads, const Tensor& local,
                              std::int64_t batch, const Tensor& send, const Tensor& recv) const {
  KINTSUGI_ASSERT(group_);
  const Blocks x = blocks(local, heads, batch, send, recv, size_);
  // Rank j gets its own rows of this rank's columns.
  for (int j = 0; j < size_; ++j)
    for (std::int64_t b = 0; b < batch; ++b)
      be.copy(x.heads.rows(b * x.seq + j * x.local_seq, x.local_seq),
              x.send.rows(j * x.rows + b * x.local_seq, x.local_seq));
  group_->all_to_all(x.send, x.recv);
  // Rank i sent column block i.
  for (int i = 0; i < size_; ++i)
    be.copy_columns(x.recv.rows(i * x.rows, x.rows), 0, local, i * x.part, x.part);
}

}  // namespace kintsugi
