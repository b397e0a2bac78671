#pragma once
// Standalone SVG pictures: the helpers the training's loss plot (train/loss_plot.hpp) and the
// planner's scaling plot (`kintsugi plan --scaling`) share, and a line plot of named series.
// Opens in any browser.
#include <string>
#include <utility>
#include <vector>

namespace kintsugi {

std::string svg_escape(const std::string& s);
// A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `count` ticks.
double svg_tick_step(double span, int count);
// Writes `svg` to `path` through a temporary file and a rename (a reader never sees half a
// picture); a failure is an Error naming `what` and the path.
void write_svg_file(const std::string& path, const std::string& svg, const std::string& what);

struct PlotSeries {
  std::string label, color;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool dashed = false;
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log2_x = false;  // x on a base-2 logarithmic axis, ticked at the points' x values
};

void write_line_plot(const std::string& path, const LinePlot& plot);

}  // namespace kintsugi
