#pragma once
// A batch-size ramp-up for a planned layout (`kintsugi plan --rampup-tokens`, docs/planner.md):
// GPT-3's recipe, Brown et al. 2020, "Language Models are Few-Shot Learners" (arXiv:2005.14165),
// Sec. 2.3 and App. B: "we also gradually increase the batch size linearly from a small value
// (32k tokens) to the full value over the first 4-12 billion tokens of training, depending on
// the model size". In train.batch_rampup's terms (train/batch_rampup.hpp):
//   start     = the smallest step of the ramp at or above 32768 tokens (at most the full batch)
//   increment = the smallest number of sequences every batch of the layout must be a multiple
//               of (dp x micro-batch, times pp where the schedule needs it)
//   samples   = the ramp's tokens / seq_len
#include <cstdint>
#include <optional>
#include <string>

#include "kintsugi/model/config.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi {

struct RampupSuggestion {
  std::int64_t start = 0, increment = 0, samples = 0;
};

constexpr double kGpt3RampStartTokens = 32768;  // Brown et al. 2020, App. B ("32k tokens")

// None when the layout leaves no room for a ramp (its full batch is one step of the ramp) or
// ramp_tokens is below one sequence.
std::optional<RampupSuggestion> suggest_rampup(const ModelConfig& model, const Layout& layout,
                                               std::int64_t global_batch, double ramp_tokens);

}  // namespace kintsugi
