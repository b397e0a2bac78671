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

}  // namespace kintsugi
