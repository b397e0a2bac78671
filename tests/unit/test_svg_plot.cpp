// The line plot's legend (core/svg_plot.hpp) lies outside the plot area, so that it can never
// cover a curve: read back from the SVG, each label's box and its line stroke are above the
// axes' frame, however many series there are and wherever their points lie.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "kintsugi/core/svg_plot.hpp"
#include "support/files.hpp"
#include "unit/scratch_dir.hpp"

namespace kintsugi {
namespace {

struct Box {
  double x0, y0, x1, y1;
  bool intersects(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

using testing::read_bytes;

// The axes' frame: the one unfilled rectangle with the frame's stroke.
Box plot_area(const std::string& svg) {
  std::smatch m;
  const std::regex frame(
      R"re(<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)" fill="none")re");
  EXPECT_TRUE(std::regex_search(svg, m, frame)) << svg;
  const double x = std::stod(m[1]), y = std::stod(m[2]);
  return {x, y, x + std::stod(m[3]), y + std::stod(m[4])};
}

// A label's text box: 12 px type, generously 8 px per character, from its baseline.
Box label_box(const std::string& svg, const std::string& label) {
  std::smatch m;
  const std::regex text("<text x=\"([0-9.]+)\" y=\"([0-9.]+)\"[^>]*>" + label + "</text>");
  EXPECT_TRUE(std::regex_search(svg, m, text)) << label << " is not in\n" << svg;
  const double x = std::stod(m[1]), y = std::stod(m[2]);
  return {x, y - 12, x + 8.0 * static_cast<double>(label.size()), y + 4};
}

TEST(SvgPlot, LegendNeverOverlapsThePlotArea) {
  ScratchDir dir("svg_plot");
  for (int count : {1, 2, 5}) {
    LinePlot plot{.title = "loss", .x_label = "step", .y_label = "loss"};
    for (int k = 0; k < count; ++k) {
      // Points in every corner, the top left (where a legend used to sit) first.
      PlotSeries s{.label = "series number " + std::to_string(k), .color = "#123456"};
      s.points = {{0, 10}, {1, 10}, {0, 0}, {100, 10}, {100, 0}};
      plot.series.push_back(s);
    }
    const auto path = dir / ("plot" + std::to_string(count) + ".svg");
    write_line_plot(path.string(), plot, "test plot");
    const std::string svg = read_bytes(path);
    const Box area = plot_area(svg);
    Box previous{0, 0, 0, 0};
    for (const PlotSeries& s : plot.series) {
      const Box label = label_box(svg, s.label);
      EXPECT_FALSE(label.intersects(area))
          << count << " series: the legend entry " << s.label << " at (" << label.x0 << ", "
          << label.y1 << ") overlaps the plot area from (" << area.x0 << ", " << area.y0 << ")";
      EXPECT_FALSE(label.intersects(previous)) << s.label << " overlaps the entry above it";
      previous = label;
    }
  }
}

}  // namespace
}  // namespace kintsugi
