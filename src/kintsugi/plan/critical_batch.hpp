#pragma once
// The largest global batch that still trains efficiently, from the critical batch size of the
// literature (docs/planner.md, "A batch that converges").
//
// McCandlish et al. 2018, "An Empirical Model of Large-Batch Training" (arXiv:1812.06162),
// define the critical batch B_crit, about the gradient noise scale B_noise = tr(Sigma)/|G|^2:
// below it a larger batch cuts the steps almost proportionally, above it mostly wastes data.
// Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361), Eq. (1.4)
// and Sec. 5.1, fit it for GPT-2-style decoders as a function of the loss alone:
//   B_crit(L) = B_* / L^(1 / alpha_B),   B_* ~ 2e8 tokens,   alpha_B ~ 0.21
// with L the cross-entropy in nats per token on their WebText2 data (GPT-2's 50257-token BPE,
// 1024-token context); losses on other data or tokenizers are not on the same scale, which the
// fit does not cover. Training should keep its global batch at or below B_crit of the loss it
// is at; a whole campaign's limit is B_crit of the loss it starts its full batch at.
#include <cstdint>

namespace kintsugi {

struct CriticalBatchFit {
  double b_star_tokens = 2e8;  // Kaplan et al. 2020, Eq. (1.4)
  double alpha_b = 0.21;       // likewise
};

// B_crit(L) in tokens; kintsugi::Error unless loss is a finite number > 0.
double critical_batch_tokens(double loss_nats, const CriticalBatchFit& fit = {});

// A critical batch of at least this many sequences passes any batch a run could take (a small
// loss: L = 0.001 gives 4e22 tokens); critical_batch_sequences saturates there.
constexpr std::int64_t kUnboundedCriticalBatch = 9'000'000'000'000'000'000;

// The largest global batch in sequences of `seq_len` tokens at or below B_crit(loss) (at least
// 1 sequence, at most kUnboundedCriticalBatch).
std::int64_t critical_batch_sequences(double loss_nats, std::int64_t seq_len,
                                      const CriticalBatchFit& fit = {});

}  // namespace kintsugi
