#include "kintsugi/train/loss_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/svg_plot.hpp"

namespace kintsugi {

void write_loss_svg(const std::string& path, const LossCurve& c) {
  PlotSeries train{.label = "train loss", .color = "#1f77b4", .dots = false};
  for (auto [step, loss] : c.train) train.points.emplace_back(static_cast<double>(step), loss);
  PlotSeries val{.label = "validation loss", .color = "#d62728"};
  for (auto [step, loss] : c.val) val.points.emplace_back(static_cast<double>(step), loss);
  write_line_plot(path, LinePlot{.title = c.title, .x_label = "step",
                                 .y_label = "loss (nats/token)", .series = {train, val}},
                  "loss plot");
}

std::string describe_training_data(const DataConfig& data) {
  if (data.blend.size() <= 1) return data.blend.empty() ? data.train : data.blend.front().path;
  double total = 0;
  for (const DataSource& d : data.blend) total += d.weight;
  std::string text;
  for (const DataSource& d : data.blend)
    text += fmt::format("{}{} {:.3g}%", text.empty() ? "" : " + ", d.path, 100 * d.weight / total);
  return text;
}

void write_lr_svg(const std::string& path, const LrSchedule& schedule, std::int64_t steps,
                  const std::string& title) {
  // Every step of a short run; a long one at about 2000 evenly spread steps plus the shape's
  // corners (the end of the warm-up, wsd's decay start, the end of the decay), so that no
  // corner is cut.
  std::vector<std::int64_t> at;
  const std::int64_t stride = std::max<std::int64_t>(1, steps / 2000);
  for (std::int64_t s = 1; s <= steps; s += stride) at.push_back(s);
  for (std::int64_t s : {schedule.warmup_steps, schedule.warmup_steps + 1, schedule.decay_start(),
                         schedule.decay_start() + 1, schedule.decay_steps,
                         schedule.decay_steps + 1, steps})
    if (s >= 1 && s <= steps) at.push_back(s);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  PlotSeries lr{.label = fmt::format("{} schedule", name_of(schedule.shape)), .color = "#2ca02c",
                .dots = false};
  for (std::int64_t s : at)
    lr.points.emplace_back(static_cast<double>(s), schedule.at(s - 1));
  write_line_plot(path, LinePlot{.title = title, .x_label = "step", .y_label = "learning rate",
                                 .series = {lr}},
                  "learning-rate plot");
}

void add_earlier_steps(LossCurve& curve, const std::string& metrics_path,
                       std::int64_t through_step) {
  LossCurve earlier;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    const auto step = j["step"].get<std::int64_t>();
    if (step > through_step) continue;
    if (j.contains("loss")) earlier.train.emplace_back(step, j["loss"].get<double>());
    if (j.contains("val_loss")) earlier.val.emplace_back(step, j["val_loss"].get<double>());
  }
  // The resumed run's own evaluation at through_step repeats the earlier one: keep one.
  if (!earlier.val.empty() && !curve.val.empty() && curve.val.front().first == through_step &&
      earlier.val.back().first == through_step)
    earlier.val.pop_back();
  curve.train.insert(curve.train.begin(), earlier.train.begin(), earlier.train.end());
  curve.val.insert(curve.val.begin(), earlier.val.begin(), earlier.val.end());
}

}  // namespace kintsugi
