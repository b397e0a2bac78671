#pragma once
// Standalone SVG pictures: a line plot of named series, which the training's loss and
// learning-rate plots (train/loss_plot.hpp) and the planner's scaling plot (`kintsugi plan
// --scaling`) draw, and its helpers. Opens in any browser.
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
  bool dots = true;  // a dot at each point (measurements); off for dense curves
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log2_x = false;  // x on a base-2 logarithmic axis, ticked at the points' x values
};

// The legend is a band of its own above the axes (one row per series: its line and label), so
// that it never covers a curve. A failure to write is an Error naming `what` ("loss plot") and
// the path.
void write_line_plot(const std::string& path, const LinePlot& plot,
                     const std::string& what = "plot");

}  // namespace kintsugi
