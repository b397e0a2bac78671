#include "kintsugi/plan/rampup_suggestion.hpp"

#include <cmath>

#include "kintsugi/parallel/layout_rules.hpp"

namespace kintsugi {

namespace {

bool splits(const ModelConfig& model, const Layout& l, std::int64_t batch) {
  return layout_problem(model, layout_spec(l, batch)).empty();
}

}  // namespace

std::optional<RampupSuggestion> suggest_rampup(const ModelConfig& model, const Layout& layout,
                                               std::int64_t global_batch, double ramp_tokens) {
  const double seq = static_cast<double>(model.seq_len);
  const auto samples = static_cast<std::int64_t>(ramp_tokens / seq);
  if (samples < 1) return std::nullopt;
  // The step of the ramp: the layout's unit of sequences, or that times pp where a schedule
  // needs whole rounds of micro-batches over the stages (layout_problem decides).
  const std::int64_t unit = layout.parallel.dp * layout.micro_batch;
  for (std::int64_t step : {unit, unit * layout.parallel.pp}) {
    if (global_batch % step != 0) continue;
    const auto from = static_cast<std::int64_t>(std::ceil(kGpt3RampStartTokens / seq / step));
    const std::int64_t start = std::min(global_batch, std::max<std::int64_t>(1, from) * step);
    if (start >= global_batch) return std::nullopt;
    bool ok = true;
    for (std::int64_t b = start; b <= global_batch && ok; b += step) ok = splits(model, layout, b);
    if (ok) return RampupSuggestion{start, step, samples};
  }
  return std::nullopt;
}

}  // namespace kintsugi
