#include "kintsugi/data/batch_sampler.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi::data {

BatchSampler::BatchSampler(TokenFile tokens, std::int64_t seq_len, std::uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  if (seq_len_ < 1) fail("sequence length must be at least 1, got {}", seq_len_);
  if (tokens_.size() <= seq_len_)
    fail("token file {} holds {} tokens, too few for sequences of {} tokens (at least {} are "
         "needed): use more data or a shorter sequence length",
         tokens_.path().string(), tokens_.size(), seq_len_, seq_len_ + 1);
}

std::int64_t BatchSampler::train_start(std::int64_t step, std::int64_t sequence) const {
  KINTSUGI_ASSERT(step >= 0 && sequence >= 0);
  // One Philox stream per step and one counter per sequence: any slice of any step's batch is
  // computed directly, without drawing the numbers before it.
  static const std::uint64_t stream = stream_of("train-batches");
  const auto bound = static_cast<std::uint64_t>(tokens_.size() - seq_len_);
  return static_cast<std::int64_t>(uniform_int_at(seed_, stream + static_cast<std::uint64_t>(step),
                                                  static_cast<std::uint64_t>(sequence), bound));
}

void BatchSampler::copy_window(std::int64_t start, std::int32_t* inputs,
                               std::int32_t* targets) const {
  tokens_.read(start, seq_len_, inputs);
  tokens_.read(start + 1, seq_len_, targets);
}

void BatchSampler::sample(std::int64_t step, std::int64_t first_sequence,
                          std::int64_t num_sequences, std::int32_t* inputs,
                          std::int32_t* targets) const {
  KINTSUGI_ASSERT(first_sequence >= 0 && num_sequences >= 0);
  for (std::int64_t k = 0; k < num_sequences; ++k)
    copy_window(train_start(step, first_sequence + k), inputs + k * seq_len_,
                targets + k * seq_len_);
}

std::int64_t BatchSampler::eval_start(std::int64_t window, std::int64_t num_windows) const {
  KINTSUGI_ASSERT(num_windows >= 1 && window >= 0 && window < num_windows);
  if (num_windows == 1) return 0;
  const auto last_start = static_cast<__int128>(tokens_.size() - seq_len_ - 1);
  return static_cast<std::int64_t>(window * last_start / (num_windows - 1));
}

void BatchSampler::eval_window(std::int64_t window, std::int64_t num_windows,
                               std::int32_t* inputs, std::int32_t* targets) const {
  copy_window(eval_start(window, num_windows), inputs, targets);
}

std::int64_t BatchSampler::max_disjoint_eval_windows() const {
  return (tokens_.size() - 1) / seq_len_;
}

}  // namespace kintsugi::data
