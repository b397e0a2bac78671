#pragma once
// Which token windows make up each training and evaluation batch.
//
// Training batches are defined globally, as pure functions of (seed, step, sequence index):
// sequence i of the global batch of optimizer step s starts at
//   start(s, i) = uniform_int_at(seed, stream_of("train-batches") + s, i, N - T)
// for a file of N tokens and sequences of T tokens; inputs are tokens [start, start + T),
// targets tokens [start + 1, start + T + 1). A data-parallel rank samples just its slice
// [first, first + count) of the global batch and gets exactly the sequences a single process
// would, and resuming at step s needs no sampler state.
//
// Evaluation windows are seed-independent and spread evenly over the file: of W windows,
// window w starts at floor(w * (N - T - 1) / (W - 1)) (0 when W = 1), so the first starts at
// token 0 and the last ends at the file's last token. With W <= max_disjoint_eval_windows()
// no token is predicted twice.
#include <cstdint>

#include "kintsugi/data/token_file.hpp"

namespace kintsugi::data {

class BatchSampler {
 public:
  // kintsugi::Error if the file holds no more than `seq_len` tokens (one sequence needs
  // seq_len + 1: the last target).
  BatchSampler(TokenFile tokens, std::int64_t seq_len, std::uint64_t seed);

  std::int64_t seq_len() const { return seq_len_; }
  const TokenFile& tokens() const { return tokens_; }

  // First token of sequence `sequence` of step `step`'s global batch.
  std::int64_t train_start(std::int64_t step, std::int64_t sequence) const;
  // Fills inputs and targets, each [num_sequences][seq_len] row-major, with sequences
  // [first_sequence, first_sequence + num_sequences) of step `step`'s global batch.
  void sample(std::int64_t step, std::int64_t first_sequence, std::int64_t num_sequences,
              std::int32_t* inputs, std::int32_t* targets) const;

  // First token of evaluation window `window` of `num_windows`.
  std::int64_t eval_start(std::int64_t window, std::int64_t num_windows) const;
  // Fills one row of seq_len inputs and targets with that window.
  void eval_window(std::int64_t window, std::int64_t num_windows, std::int32_t* inputs,
                   std::int32_t* targets) const;
  // The most windows that never predict a token twice: (N - 1) / T.
  std::int64_t max_disjoint_eval_windows() const;

 private:
  void copy_window(std::int64_t start, std::int32_t* inputs, std::int32_t* targets) const;
  TokenFile tokens_;
  std::int64_t seq_len_;
  std::uint64_t seed_;
};

}  // namespace kintsugi::data
