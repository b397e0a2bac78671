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
  constexpr double W = 800, H = 480, L = 70, R = 20, T = 40, B = 50;
  std::int64_t max_step = 1;
  double lo = 1e300, hi = -1e300;
  for (const auto* series : {&c.train, &c.val})
    for (auto [s, v] : *series) {
      max_step = std::max(max_step, s);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto x = [&](double s) { return L + (W - L - R) * s / max_step; };
  auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"24\" font-size=\"15\">{}</text>\n",
      W, H, L, svg_escape(c.title));
  const double ys = svg_tick_step(hi - lo, 6);
  for (double v = std::ceil(lo / ys) * ys; v <= hi; v += ys)
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
        L, W - R, y(v), y(v), L - 6, y(v) + 4, v);
  const double xs = std::max(1.0, svg_tick_step(static_cast<double>(max_step), 8));
  for (double s = 0; s <= max_step; s += xs)
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n",
        x(s), x(s), T, H - B, x(s), H - B + 16, s);
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n"
      "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">loss (nats/token)"
      "</text>\n",
      L, T, W - L - R, H - T - B, (L + W - R) / 2, H - 12, (T + H - B) / 2);
  auto polyline = [&](const auto& series, const char* color, bool dots) {
    if (series.empty()) return;
    std::string pts;
    for (auto [s, v] : series) pts += fmt::format("{:.1f},{:.1f} ", x(s), y(v));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                       color, pts);
    if (dots)
      for (auto [s, v] : series)
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x(s), y(v),
                           color);
  };
  polyline(c.train, "#1f77b4", false);
  polyline(c.val, "#d62728", true);
  svg += fmt::format(
      "<text x=\"{0}\" y=\"{1}\" fill=\"#1f77b4\">train loss</text>"
      "<text x=\"{0}\" y=\"{2}\" fill=\"#d62728\">validation loss</text>\n</svg>\n",
      W - R - 120, T + 18, T + 34);

  write_svg_file(path, svg, "loss plot");
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
  PlotSeries lr{.label = fmt::format("{} schedule", name_of(schedule.shape)), .color = "#2ca02c"};
  for (std::int64_t s : at)
    lr.points.emplace_back(static_cast<double>(s), schedule.at(s - 1));
  write_line_plot(path, LinePlot{.title = title, .x_label = "step", .y_label = "learning rate",
                                 .series = {lr}});
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
