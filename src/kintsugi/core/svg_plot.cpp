#include "kintsugi/core/svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::string svg_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

double svg_tick_step(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

void write_svg_file(const std::string& path, const std::string& svg, const std::string& what) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << svg;
  out.close();
  if (!out) fail("cannot write the {} {}", what, path);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    fail("cannot write the {} {}: {}", what, path, std::strerror(error));
  }
}

void write_line_plot(const std::string& path, const LinePlot& p, const std::string& what) {
  // The legend is a band of its own between the title and the axes, one row per drawn series,
  // so that it can never cover a curve; the plot area keeps its size below it.
  constexpr double W = 800, L = 70, R = 20, B = 50, kPlotHeight = 390, kRow = 16, kLegendTop = 32;
  const auto drawn = std::count_if(p.series.begin(), p.series.end(),
                                   [](const PlotSeries& s) { return !s.points.empty(); });
  const double T = kLegendTop + kRow * static_cast<double>(drawn) + 8, H = T + kPlotHeight + B;
  double x_lo = 1e300, x_hi = -1e300, lo = 1e300, hi = -1e300;
  std::set<double> xs;
  for (const PlotSeries& s : p.series)
    for (auto [x, y] : s.points) {
      const double xv = p.log2_x ? std::log2(x) : x;
      x_lo = std::min(x_lo, xv), x_hi = std::max(x_hi, xv);
      lo = std::min(lo, y), hi = std::max(hi, y);
      xs.insert(x);
    }
  if (x_lo > x_hi) x_lo = 0, x_hi = 1;
  if (x_hi - x_lo < 1e-9) x_lo -= 0.5, x_hi += 0.5;
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto x = [&](double v) {
    const double xv = p.log2_x ? std::log2(v) : v;
    return L + (W - L - R) * (xv - x_lo) / (x_hi - x_lo);
  };
  auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"24\" font-size=\"15\">{}</text>\n",
      W, H, L, svg_escape(p.title));
  const double ys = svg_tick_step(hi - lo, 6);
  for (double v = std::ceil(lo / ys) * ys; v <= hi; v += ys)
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
        L, W - R, y(v), y(v), L - 6, y(v) + 4, v);
  // x ticks: at the points on a log axis (node counts), else evenly.
  std::vector<double> ticks;
  if (p.log2_x) {
    ticks.assign(xs.begin(), xs.end());
  } else {
    const double step = svg_tick_step(x_hi - x_lo, 8);
    for (double v = std::ceil(x_lo / step) * step; v <= x_hi; v += step) ticks.push_back(v);
  }
  for (double v : ticks)
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n",
        x(v), x(v), T, H - B, x(v), H - B + 16, v);
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      L, T, W - L - R, H - T - B, (L + W - R) / 2, H - 12, svg_escape(p.x_label), (T + H - B) / 2,
      svg_escape(p.y_label));
  int legend = 0;
  for (const PlotSeries& s : p.series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (auto [px, py] : s.points) pts += fmt::format("{:.1f},{:.1f} ", x(px), y(py));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>\n",
                       s.color, s.dashed ? " stroke-dasharray=\"6,4\"" : "", pts);
    for (auto [px, py] : s.dots ? s.points : decltype(s.points){})
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x(px), y(py),
                         s.color);
    // Its legend row: a stroke of the series' line, then its label (baseline 12 below the top).
    const double row = kLegendTop + kRow * legend++;
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"{}/>"
        "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
        L, L + 20, row + 8, row + 8, s.color, s.dashed ? " stroke-dasharray=\"6,4\"" : "", L + 26,
        row + 12, s.color, svg_escape(s.label));
  }
  svg += "</svg>\n";
  write_svg_file(path, svg, what);
}

}  // namespace kintsugi
