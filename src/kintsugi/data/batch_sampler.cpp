#include "kintsugi/data/batch_sampler.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi::data {

BatchSampler::BatchSampler(std::vector<Source> sources, std::int64_t seq_len, std::uint64_t seed)
    : sources_(std::move(sources)), seq_len_(seq_len), seed_(seed) {
  if (seq_len_ < 1) fail("sequence length must be at least 1, got {}", seq_len_);
  KINTSUGI_ASSERT(!sources_.empty());
  double total = 0;
  for (const Source& s : sources_) {
    if (s.tokens->size() <= seq_len_)
      fail("token file {} holds {} tokens, too few for sequences of {} tokens (at least {} are "
           "needed): use more data or a shorter model.seq_len",
           s.tokens->path().string(), s.tokens->size(), seq_len_, seq_len_ + 1);
    if (!(s.weight > 0) || !std::isfinite(s.weight))
      fail("the weight of {} is {}: blend weights must be positive", s.tokens->path().string(),
           s.weight);
    total += s.weight;
  }
  double sum = 0;
  for (const Source& s : sources_) cumulative_.push_back((sum += s.weight) / total);
  cumulative_.back() = 1;
}

BatchSampler::BatchSampler(std::unique_ptr<TokenSource> tokens, std::int64_t seq_len,
                           std::uint64_t seed)
    : BatchSampler(std::vector<Source>{{std::move(tokens), 1.0}}, seq_len, seed) {}

BatchSampler::BatchSampler(TokenFile tokens, std::int64_t seq_len, std::uint64_t seed)
    : BatchSampler(std::make_unique<TokenFile>(std::move(tokens)), seq_len, seed) {}

std::size_t BatchSampler::source_of(std::int64_t step, std::int64_t sequence) const {
  if (sources_.size() == 1) return 0;
  static const std::uint64_t stream = stream_of("train-blend");
  const double u = uniform_at(seed_, stream + static_cast<std::uint64_t>(step),
                              static_cast<std::uint64_t>(sequence));
  return static_cast<std::size_t>(
      std::upper_bound(cumulative_.begin(), cumulative_.end() - 1, u) - cumulative_.begin());
}

std::int64_t BatchSampler::train_start(std::int64_t step, std::int64_t sequence) const {
  KINTSUGI_ASSERT(step >= 0 && sequence >= 0);
  // One Philox stream per step and one counter per sequence: any slice of any step's batch is
  // computed directly, without drawing the numbers before it.
  static const std::uint64_t stream = stream_of("train-batches");
  const auto bound =
      static_cast<std::uint64_t>(tokens(source_of(step, sequence)).size() - seq_len_);
  return static_cast<std::int64_t>(uniform_int_at(seed_, stream + static_cast<std::uint64_t>(step),
                                                  static_cast<std::uint64_t>(sequence), bound));
}

void BatchSampler::copy_window(std::size_t source, std::int64_t start, std::int32_t* inputs,
                               std::int32_t* targets) const {
  tokens(source).read(start, seq_len_, inputs);
  tokens(source).read(start + 1, seq_len_, targets);
}

void BatchSampler::sample(std::int64_t step, std::int64_t first_sequence,
                          std::int64_t num_sequences, std::int32_t* inputs,
                          std::int32_t* targets) const {
  KINTSUGI_ASSERT(first_sequence >= 0 && num_sequences >= 0);
  for (std::int64_t k = 0; k < num_sequences; ++k) {
    const std::int64_t sequence = first_sequence + k;
    copy_window(source_of(step, sequence), train_start(step, sequence), inputs + k * seq_len_,
                targets + k * seq_len_);
  }
}

std::size_t BatchSampler::eval_source(std::int64_t window) const {
  return static_cast<std::size_t>(window) % sources_.size();
}

std::int64_t BatchSampler::eval_start(std::int64_t window, std::int64_t num_windows) const {
  KINTSUGI_ASSERT(num_windows >= 1 && window >= 0 && window < num_windows);
  const auto k = static_cast<std::int64_t>(sources_.size());
  const std::int64_t source = window % k, local = window / k;
  const std::int64_t local_windows = (num_windows - source + k - 1) / k;
  if (local_windows == 1) return 0;
  const auto last_start =
      static_cast<__int128>(tokens(static_cast<std::size_t>(source)).size() - seq_len_ - 1);
  return static_cast<std::int64_t>(local * last_start / (local_windows - 1));
}

void BatchSampler::eval_window(std::int64_t window, std::int64_t num_windows,
                               std::int32_t* inputs, std::int32_t* targets) const {
  copy_window(eval_source(window), eval_start(window, num_windows), inputs, targets);
}

std::int64_t BatchSampler::max_disjoint_eval_windows(std::size_t source) const {
  return (tokens(source).size() - 1) / seq_len_;
}

}  // namespace kintsugi::data
