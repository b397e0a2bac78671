#include "kintsugi/cli/plan_scaling.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kintsugi/cli/plan_report.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/svg_plot.hpp"
#include "kintsugi/plan/scaling.hpp"

namespace kintsugi::cli {

namespace {

// A curve has one global batch and precision, at least two node counts, and is ranked by step
// time: the search's other flags are refused, not ignored.
void check_scaling_flags(const PlanArgs& a, const CampaignAxes& axes) {
  if (axes.global_batch.size() != 1 || axes.precision.size() != 1)
    fail("--scaling takes one --global-batch (the first node count's, for weak scaling) and one "
         "--precision");
  if (a.tokens > 0 || a.tokens_per_param > 0 || !a.objective.empty())
    fail("--scaling ranks each node count's layouts by step time; --tokens, --tokens-per-param "
         "and --objective are for the search");
  if (axes.nodes.size() < 2) fail("--scaling needs at least two node counts (--nodes 16:128:x2)");
  if (!a.write_config.empty() || a.rampup_tokens > 0)
    fail("--scaling draws a curve of each node count's fastest layout; {} is for the search's "
         "best (run plan without --scaling)",
         a.write_config.empty() ? "--rampup-tokens" : "--write-config");
}

void print_scaling_json(const PlanInputs& in, Scaling kind,
                        const std::vector<ScalingPoint>& points) {
  const Workload& w = in.first;
  nlohmann::json j = {{"model", in.base.model.name}, {"cluster", in.chosen.spec.name},
                      {"scaling", std::string(name_of(kind))}, {"seq", w.model.seq_len},
                      {"precision", std::string(name_of(w.precision))},
                      {"points", nlohmann::json::array()}};
  for (const ScalingPoint& p : points) {
    nlohmann::json q = {{"nodes", p.nodes}, {"devices", p.devices},
                        {"global_batch", p.global_batch}, {"fits", p.best.has_value()}};
    if (p.best) {
      q["efficiency"] = p.efficiency;
      q["tokens_per_s_per_device"] = p.tokens_per_s_per_device;
      q["model_tflops_per_device"] = p.model_tflops_per_device;
      q["prediction"] = to_json(*p.best);
    }
    j["points"].push_back(q);
  }
  fmt::print("{}\n", j.dump(2));
}

void print_scaling_table(const PlanInputs& in, Scaling kind,
                         const std::vector<ScalingPoint>& points) {
  const ClusterSpec& cluster = in.chosen.spec;
  const Workload& w = in.first;
  fmt::print("{} scaling of {} on {} ({}), seq {}, {}: global batch {}{}; the fastest layout "
             "the pins allow at each node count\n",
             name_of(kind), in.base.model.name, cluster.name, cluster.source, w.model.seq_len,
             w.precision, w.global_batch,
             kind == Scaling::weak ? " at the first node count, growing with the nodes" : "");
  print_notes(in.chosen.notes);
  std::vector<std::vector<std::string>> rows;
  for (const ScalingPoint& p : points) {
    rows.push_back({std::to_string(p.nodes), std::to_string(p.devices),
                    std::to_string(p.global_batch),
                    p.best ? describe(p.best->layout) : "no layout fits"});
    if (p.best)
      rows.back().insert(rows.back().end(),
                         {seconds_text(p.best->time.total()),
                          rate_text(p.tokens_per_s_per_device),
                          three_digits_text(p.model_tflops_per_device),
                          fmt::format("{:.1f}%", 100 * p.efficiency)});
    else
      rows.back().resize(8);
  }
  print_table({{"nodes"}, {"devs"}, {"GBS"}, {"layout", true}, {"step"}, {"tok/s/dev"},
               {"TF/s/dev"}, {"eff"}},
              rows, 3);
  fmt::print("\ndevs: devices; tok/s/dev: tokens/s per device; TF/s/dev: model TFLOP/s per "
             "device;\neff: efficiency, tokens/s per device over the first fitting row's ({}).\n",
             kind == Scaling::strong ? "(T_1 N_1) / (T_N N), the global batch fixed"
                                     : "T_1 / T_N, the batch per replica fixed");
}

// --plot: the predicted efficiency against the devices, with the ideal 100% beside it.
void write_scaling_plot(const std::string& path, const PlanInputs& in, Scaling kind,
                        const std::vector<ScalingPoint>& points) {
  LinePlot plot{.title = fmt::format("{} scaling: {} on {}", name_of(kind), in.base.model.name,
                                     in.chosen.spec.name),
                .x_label = "devices",
                .y_label = "efficiency (%)",
                .log2_x = true};
  PlotSeries predicted{.label = "predicted (kintsugi plan)", .color = "#1f77b4"};
  PlotSeries ideal{.label = "ideal", .color = "#999", .dashed = true};
  for (const ScalingPoint& p : points)
    if (p.best) {
      predicted.points.emplace_back(static_cast<double>(p.devices), 100 * p.efficiency);
      ideal.points.emplace_back(static_cast<double>(p.devices), 100.0);
    }
  plot.series = {ideal, predicted};
  write_line_plot(path, plot);
}

}  // namespace

void run_scaling(const PlanArgs& a, const PlanInputs& in) {
  check_scaling_flags(a, in.axes);
  const Scaling kind = parse_name<Scaling>(a.scaling, "--scaling");
  const std::vector<ScalingPoint> points =
      scaling_curve(in.first, in.chosen.spec, in.axes.nodes, in.space, kind);
  if (a.json) print_scaling_json(in, kind, points);
  else print_scaling_table(in, kind, points);
  if (std::none_of(points.begin(), points.end(),
                   [](const ScalingPoint& p) { return p.best.has_value(); }))
    fail("no layout fits at any node count: add nodes or allow more sharding");
  if (!a.plot.empty()) {
    write_scaling_plot(a.plot, in, kind, points);
    if (!a.json) fmt::print("wrote {}\n", a.plot);
  } else if (!a.json) {
    fmt::print("(--plot FILE.svg draws the efficiency against the devices)\n");
  }
}

}  // namespace kintsugi::cli
