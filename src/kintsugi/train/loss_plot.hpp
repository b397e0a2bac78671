#pragma once
// A loss-curve picture as a standalone SVG: training loss per step and validation loss where it
// was measured, with labelled axes. Opens in any browser.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kintsugi {

struct LossCurve {
  std::string title;
  std::vector<std::pair<std::int64_t, double>> train;  // (step, loss)
  std::vector<std::pair<std::int64_t, double>> val;
};

void write_loss_svg(const std::string& path, const LossCurve& curve);

// A resumed run draws the whole run: the points of steps up to `through_step` are read from
// the metrics file (one JSON object per step, as MetricsWriter writes it) and put first.
void add_earlier_steps(LossCurve& curve, const std::string& metrics_path,
                       std::int64_t through_step);

}  // namespace kintsugi
