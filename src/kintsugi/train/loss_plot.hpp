#pragma once
// A loss-curve picture as a standalone SVG: training loss per step and validation loss where it
// was measured, with labelled axes. Opens in any browser.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

struct LossCurve {
  std::string title;
  std::vector<std::pair<std::int64_t, double>> train;  // (step, loss)
  std::vector<std::pair<std::int64_t, double>> val;
};

void write_loss_svg(const std::string& path, const LossCurve& curve);

// The training data as a picture's title names it: data.train's path, or every dataset of a
// blend with its share of the sequences ("a.bin 70% + b.bin 30%").
std::string describe_training_data(const DataConfig& data);

// The learning rate of steps 1..steps (step s trains with schedule.at(s - 1)) as a line plot
// (core/svg_plot.hpp): the schedule's shape, drawn from the config alone.
void write_lr_svg(const std::string& path, const LrSchedule& schedule, std::int64_t steps,
                  const std::string& title);

// A resumed run draws the whole run: the points of steps up to `through_step` are read from
// the metrics file (one JSON object per step, as MetricsWriter writes it, and the step-0
// evaluation without a training loss) and put first.
void add_earlier_steps(LossCurve& curve, const std::string& metrics_path,
                       std::int64_t through_step);

}  // namespace kintsugi
