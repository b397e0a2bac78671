#pragma once
// Which token windows make up each training and evaluation batch.
//
// Training batches are defined globally, as pure functions of (seed, step, sequence index).
// With one dataset, sequence i of the global batch of optimizer step s starts at
//   start(s, i) = uniform_int_at(seed, stream_of("train-batches") + s, i, N - T)
// for a stream of N tokens and sequences of T tokens; inputs are tokens [start, start + T),
// targets tokens [start + 1, start + T + 1). With a blend of datasets (weights w_k), the
// sequence first picks its dataset: the k whose cumulative normalized weight first exceeds
//   u(s, i) = uniform_at(seed, stream_of("train-blend") + s, i),
// then its start inside that dataset as above (N its size). A data-parallel rank samples just
// its slice [first, first + count) of the global batch and gets exactly the sequences a single
// process would, and resuming at step s needs no sampler state.
//
// Evaluation windows are seed-independent and spread evenly: of W windows over K datasets,
// window w belongs to dataset w mod K and is its window j = w div K of W_k = ceil((W - k) / K);
// window j of W_k starts at floor(j * (N - T - 1) / (W_k - 1)) (0 when W_k = 1), so the first
// starts at token 0 and the last ends at the dataset's last token. With W_k <= (N - 1) / T no
// token is predicted twice.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kintsugi/data/token_file.hpp"
#include "kintsugi/data/token_source.hpp"

namespace kintsugi::data {

class BatchSampler {
 public:
  struct Source {
    std::shared_ptr<const TokenSource> tokens;
    double weight = 1;  // relative; only training batches use it
  };
  // kintsugi::Error if a dataset holds no more than `seq_len` tokens (one sequence needs
  // seq_len + 1: the last target) or a weight is not positive.
  BatchSampler(std::vector<Source> sources, std::int64_t seq_len, std::uint64_t seed);
  // One dataset.
  BatchSampler(std::unique_ptr<TokenSource> tokens, std::int64_t seq_len, std::uint64_t seed);
  BatchSampler(TokenFile tokens, std::int64_t seq_len, std::uint64_t seed);

  std::int64_t seq_len() const { return seq_len_; }
  std::size_t num_sources() const { return sources_.size(); }
  const TokenSource& tokens(std::size_t source = 0) const { return *sources_[source].tokens; }
  double weight(std::size_t source) const { return sources_[source].weight; }

  // The dataset of sequence `sequence` of step `step` (0 with one dataset).
  std::size_t source_of(std::int64_t step, std::int64_t sequence) const;
  // First token of that sequence, inside its dataset.
  std::int64_t train_start(std::int64_t step, std::int64_t sequence) const;
  // Fills inputs and targets, each [num_sequences][seq_len] row-major, with sequences
  // [first_sequence, first_sequence + num_sequences) of step `step`'s global batch.
  void sample(std::int64_t step, std::int64_t first_sequence, std::int64_t num_sequences,
              std::int32_t* inputs, std::int32_t* targets) const;

  // The dataset of evaluation window `window` of `num_windows`, and its first token there.
  std::size_t eval_source(std::int64_t window) const;
  std::int64_t eval_start(std::int64_t window, std::int64_t num_windows) const;
  // Fills one row of seq_len inputs and targets with that window.
  void eval_window(std::int64_t window, std::int64_t num_windows, std::int32_t* inputs,
                   std::int32_t* targets) const;
  // The most windows of one dataset that never predict a token twice: (N - 1) / T.
  std::int64_t max_disjoint_eval_windows(std::size_t source = 0) const;

 private:
  void copy_window(std::size_t source, std::int64_t start, std::int32_t* inputs,
                   std::int32_t* targets) const;
  std::vector<Source> sources_;
  std::vector<double> cumulative_;  // normalized cumulative weights, the last is 1
  std::int64_t seq_len_;
  std::uint64_t seed_;
};

}  // namespace kintsugi::data
