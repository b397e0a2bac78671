#include "kintsugi/cli/plan_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>

#include "kintsugi/core/parallel_layout_json.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi::cli {

namespace {
// Seconds with a unit that keeps three significant digits readable.
std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.2f}s", s);
  if (s >= 1e-3) return fmt::format("{:.1f}ms", s * 1e3);
  return fmt::format("{:.0f}us", s * 1e6);
}

// Three significant digits without an exponent, for a value below 999.5: 950, 12.3, 4.56, 0.12.
std::string three_digits(double x) {
  const int decimals = x >= 99.95 ? 0 : x >= 9.995 ? 1 : 2;
  return fmt::format("{:.{}f}", x, decimals);
}

// A value with an SI prefix and three significant digits: 950, 12.3K, 4.56M, 1.20G. The prefix
// grows until the digits fit, so no value prints as 1e+03 or 1000K.
std::string si(double x, const char* const* prefixes, int count) {
  int i = 0;
  while (i + 1 < count && x >= 999.5) x /= 1000, ++i;
  return three_digits(x) + prefixes[i];
}

std::string rate(double x) {  // tokens/s, samples/s
  static const char* const p[] = {"", "K", "M", "G", "T", "P", "E"};
  return si(x, p, 7);
}

// Joules with an SI prefix, four significant digits (the study's figures: 284 GJ, 17.65 TJ).
std::string joules(double j) {
  const char* prefix[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  int i = 0;
  while (i < 8 && j >= 1000) j /= 1000, ++i;
  return fmt::format("{:.4g} {}J", j, prefix[i]);
}

// Energy as people meet it on a bill: Wh with a prefix, three significant digits (4.24 GWh).
std::string watt_hours(double j) {
  static const char* const p[] = {" Wh", " kWh", " MWh", " GWh", " TWh", " PWh", " EWh"};
  return si(j / 3600, p, 7);
}

// A count of hours (or kWh) with thousands separated: 1,234,567; small ones with decimals.
std::string grouped(double x) {
  if (x < 99.95) return three_digits(x);
  if (x >= 1e18) return fmt::format("{:.3g}", x);  // past what any allocation counts
  std::string digits = fmt::format("{:.0f}", x), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Wall-clock time in the unit people plan in: minutes, hours up to two days, then days.
std::string duration(double s) {
  if (s < 3600) return fmt::format("{} min", three_digits(s / 60));
  if (s < 2 * 86400) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{} d", grouped(s / 86400));
}

std::string gigabytes(double bytes) {
  const double gb = bytes / 1e9;
  return gb >= 99.95 ? grouped(gb) : three_digits(gb);
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find(' ', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// Layouts that may share a row, written as one: the same words but one, whose variants are
// listed with their common letters once ("tp 1 pp 1 dp 8 mb 2 zero2/1", "v4/2", "1f1b/gpipe");
// none where they differ in more than one word.
std::optional<std::string> one_word_apart(const std::vector<std::string>& layouts) {
  std::vector<std::vector<std::string>> all;
  for (const std::string& l : layouts) all.push_back(words(l));
  std::optional<std::size_t> differs;
  for (const auto& w : all) {
    if (w.size() != all.front().size()) return std::nullopt;
    for (std::size_t k = 0; k < w.size(); ++k)
      if (w[k] != all.front()[k]) {
        if (differs && *differs != k) return std::nullopt;
        differs = k;
      }
  }
  if (!differs) return layouts.front();
  std::vector<std::string> variants;
  for (const auto& w : all)
    if (std::find(variants.begin(), variants.end(), w[*differs]) == variants.end())
      variants.push_back(w[*differs]);
  // The letters all variants start with (never into their digits: v16/12, not v16/2).
  std::size_t common = 0;
  while (common < variants.front().size() && !std::isdigit(variants.front()[common]) &&
         std::all_of(variants.begin(), variants.end(), [&](const std::string& v) {
           return common < v.size() && v[common] == variants.front()[common];
         }))
    ++common;
  std::string merged = variants.front();
  for (std::size_t i = 1; i < variants.size(); ++i) merged += "/" + variants[i].substr(common);
  std::vector<std::string> out = all.front();
  out[*differs] = merged;
  return fmt::format("{}", fmt::join(out, " "));
}


// A column of the table: its header, whether its text aligns left, and its cell of a row.
struct Column {
  std::string head;
  bool left = false;
  std::function<std::string(const Candidate&, const CampaignCost*)> cell;
};

std::vector<Column> columns(const ReportOptions& o) {
  auto step_part = [](std::string head, double TimePrediction::*part) {
    return Column{std::move(head), false, [part](const Candidate& c, const CampaignCost*) {
                    return seconds(c.prediction.time.*part);
                  }};
  };
  std::vector<Column> out;
  if (o.show_nodes)
    out.push_back({"nodes", false, [](const Candidate& c, const CampaignCost*) {
                     return std::to_string(c.nodes);
                   }});
  if (o.show_batch)
    out.push_back({"GBS", false, [](const Candidate& c, const CampaignCost*) {
                     return std::to_string(c.workload.global_batch);
                   }});
  if (o.show_precision)
    out.push_back({"prec", false, [](const Candidate& c, const CampaignCost*) {
                     return std::string(name_of(c.workload.precision));
                   }});
  out.push_back({"layout", true, [](const Candidate& c, const CampaignCost*) {
                   return describe(c.prediction.layout);
                 }});
  out.push_back({"mem GB", false, [](const Candidate& c, const CampaignCost*) {
                   return gigabytes(c.prediction.memory.total());
                 }});
  // With a budget the table answers the campaign's questions (time and energy to train it);
  // the step, its rates and MFU, which rank the rows alike, are --wide's, as is the breakdown.
  const bool per_step = o.wide || o.tokens <= 0;
  if (per_step)
    out.push_back({"step", false, [](const Candidate& c, const CampaignCost*) {
                     return seconds(c.prediction.time.total());
                   }});
  if (o.wide) {
    out.push_back(step_part("compute", &TimePrediction::compute));
    out.push_back(step_part("tp", &TimePrediction::tp));
    out.push_back(step_part("pp", &TimePrediction::pp));
    out.push_back(step_part("dp", &TimePrediction::dp));
    out.push_back(step_part("cp", &TimePrediction::cp));
    out.push_back(step_part("ep", &TimePrediction::ep));
    out.push_back(step_part("bubble", &TimePrediction::bubble));
    out.push_back(step_part("optim", &TimePrediction::optimizer));
    out.push_back(step_part("host", &TimePrediction::host));
  }
  if (per_step)
    out.push_back({"tokens/s", false, [](const Candidate& c, const CampaignCost*) {
                     return rate(c.prediction.tokens_per_s);
                   }});
  if (o.wide)
    out.push_back({"samples/s", false, [](const Candidate& c, const CampaignCost*) {
                     return rate(c.prediction.samples_per_s);
                   }});
  if (per_step)
    out.push_back({"MFU", false, [](const Candidate& c, const CampaignCost*) {
                     return fmt::format("{:.1f}%", 100 * c.prediction.mfu);
                   }});
  if (o.wide)
    out.push_back({"HFU", false, [](const Candidate& c, const CampaignCost*) {
                     return fmt::format("{:.1f}%", 100 * c.prediction.hfu);
                   }});
  if (o.tokens > 0) {
    out.push_back({"time", false, [](const Candidate&, const CampaignCost* k) {
                     return duration(k->seconds);
                   }});
    if (o.wide) {
      out.push_back({"device-h", false, [](const Candidate&, const CampaignCost* k) {
                       return grouped(k->device_hours);
                     }});
      out.push_back({"node-h", false, [](const Candidate&, const CampaignCost* k) {
                       return grouped(k->node_hours);
                     }});
      out.push_back({"energy", false, [](const Candidate&, const CampaignCost* k) {
                       return k->energy_j ? joules(*k->energy_j) : "unknown";
                     }});
      out.push_back({"kWh", false, [](const Candidate&, const CampaignCost* k) {
                       return k->kwh() ? grouped(*k->kwh()) : "unknown";
                     }});
    } else {
      out.push_back({"energy", false, [](const Candidate&, const CampaignCost* k) {
                       return k->energy_j ? watt_hours(*k->energy_j) : "unknown";
                     }});
    }
  }
  return out;
}

}  // namespace

std::string rate_text(double per_second) { return rate(per_second); }
std::string seconds_text(double s) { return seconds(s); }
std::string three_digits_text(double x) { return three_digits(x); }

void print_table(const std::vector<TableColumn>& columns,
                 const std::vector<std::vector<std::string>>& rows,
                 std::optional<std::size_t> wrap) {
  std::vector<std::size_t> width;
  for (const TableColumn& c : columns) width.push_back(std::max(c.head.size(), c.min_width));
  for (const auto& row : rows)
    for (std::size_t k = 0; k < columns.size(); ++k) width[k] = std::max(width[k], row[k].size());
  // The wrapped column gets what the others leave of kTableWidth (at least 24).
  if (wrap) {
    std::size_t others = 0;
    for (std::size_t k = 0; k < columns.size(); ++k)
      if (k != *wrap) others += width[k] + 1 + (columns[k].left ? 1 : 0);
    width[*wrap] = std::min(width[*wrap], std::max<std::size_t>(kTableWidth - 2 - others, 24));
  }
  auto print_row = [&](std::vector<std::string> cells) {
    std::vector<std::string> rest;  // the wrapped column's words past its width
    if (wrap) {
      std::string& text = cells[*wrap];
      while (text.size() > width[*wrap] && text.rfind(' ', width[*wrap]) != std::string::npos) {
        const std::size_t cut = text.rfind(' ', width[*wrap]);
        rest.insert(rest.begin(), text.substr(cut + 1));
        text.resize(cut);
      }
    }
    std::string line, indent;
    for (std::size_t k = 0; k < columns.size(); ++k) {
      if (k > 0) line += ' ';
      if (wrap && k == *wrap) indent = std::string(line.size(), ' ');
      line += columns[k].left ? fmt::format("{:<{}} ", cells[k], width[k])  // text, then a gap
                              : fmt::format("{:>{}}", cells[k], width[k]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
    if (!rest.empty()) fmt::print("{}{}\n", indent, fmt::join(rest, " "));
  };
  std::vector<std::string> heads;
  for (const TableColumn& c : columns) heads.push_back(c.head);
  print_row(heads);
  for (const auto& row : rows) print_row(row);
}

namespace {

// What the candidate table's columns mean, under the first table; `merged`: rows were joined.
void print_legend(const ReportOptions& o, bool merged) {
  fmt::print(
      "\n{}\nmem GB: per device, 1e9 bytes, on the fullest stage.{}\n", describe_legend(),
      o.wide || o.tokens <= 0 ? "\nstep: time per optimizer step. MFU: model FLOPs over the peak."
                              : "");
  if (o.wide)
    fmt::print(
        "compute, tp, pp, dp, cp, ep, bubble, optim, host: the step's compute, the tp/pp/dp/cp\n"
        "communication and ep's token all-to-alls not hidden behind it, the pipeline bubble, the\n"
        "optimizer, host overhead.\n"
        "HFU: hardware FLOPs (recomputation counted) over the peak.\n");
  std::vector<std::string> run;
  if (o.show_nodes) run.push_back("nodes");
  if (o.show_batch) run.push_back("GBS (global batch)");
  if (o.show_precision) run.push_back("prec");
  if (!run.empty()) fmt::print("{}: the run each layout is for.\n", fmt::join(run, ", "));
  if (o.tokens > 0)
    fmt::print("{}", o.wide ? "time, device-h, node-h: wall-clock time and device- and node-hours to "
                        "train the token budget;\nenergy (and kWh): the devices' energy over "
                        "that time, unknown without the cluster's [power].\n"
                      : "time, energy: wall-clock time to train the token budget and the "
                        "devices' energy over it\n(unknown without the cluster's [power]).\n");
  if (merged)
    fmt::print("1-2 ... zero2/1: layouts ranked together with the same times (within rounding) "
               "that differ\nin one word share a row, the memory as a range (--wide lists "
               "each).\n");
  if (!o.wide)
    fmt::print("--wide adds {}.\n",
               o.tokens > 0 ? "the step and its breakdown, tokens/s, samples/s, MFU, HFU, device-\n"
                              "and node-hours, joules"
                            : "the step's breakdown, samples/s and HFU");
}

}  // namespace

void print_candidate_table(const std::vector<Candidate>& rows, std::size_t top,
                           const ClusterSpec& cluster, const ReportOptions& o,
                           const std::vector<std::size_t>& ranks) {
  const std::vector<Column> cols = columns(o);
  auto index_of = [&](const char* head) {
    return static_cast<std::size_t>(
        std::find_if(cols.begin(), cols.end(), [&](const Column& c) { return c.head == head; }) -
        cols.begin());
  };
  const std::size_t layout_col = index_of("layout"), memory_col = index_of("mem GB");
  // Every row's cells. Unless --wide (every layout on its own row), a row whose figures print
  // the same as the row above's but for the memory (the same step within rounding) and whose
  // layout differs from it in one word (a ZeRO stage, a sharding group, a recomputation that
  // changes no time shown) joins it: ranks "2-4", the variants listed ("zero2/1"), the memory
  // as a range.
  struct Line {
    std::size_t first, last;  // ranks (0-based) of the rows it shows
    std::vector<std::string> cells;
    std::vector<std::string> layouts;
    double min_memory, max_memory;
  };
  std::vector<Line> lines;
  for (std::size_t i = 0; i < std::min(top, rows.size()); ++i) {
    std::optional<CampaignCost> cost;
    if (o.tokens > 0) cost = campaign_cost(rows[i].workload, cluster, rows[i].prediction, o.tokens);
    std::vector<std::string> cells;
    for (const Column& c : cols) cells.push_back(c.cell(rows[i], cost ? &*cost : nullptr));
    const std::size_t rank = ranks.empty() ? i : ranks[i];
    const double memory = rows[i].prediction.memory.total();
    if (!o.wide && ranks.empty() && !lines.empty()) {
      Line& above = lines.back();
      bool same = true;
      for (std::size_t k = 0; k < cols.size(); ++k)
        same = same && (k == layout_col || k == memory_col || above.cells[k] == cells[k]);
      std::vector<std::string> layouts = above.layouts;
      layouts.push_back(cells[layout_col]);
      if (same && one_word_apart(layouts)) {
        above.last = rank;
        above.layouts.push_back(cells[layout_col]);
        above.min_memory = std::min(above.min_memory, memory);
        above.max_memory = std::max(above.max_memory, memory);
        continue;
      }
    }
    lines.push_back({rank, rank, cells, {cells[layout_col]}, memory, memory});
  }
  bool merged = false;
  for (Line& l : lines) {
    if (l.layouts.size() < 2) continue;
    merged = true;
    l.cells[layout_col] = *one_word_apart(l.layouts);
    if (gigabytes(l.min_memory) != gigabytes(l.max_memory))
      l.cells[memory_col] = gigabytes(l.min_memory) + "-" + gigabytes(l.max_memory);
  }
  std::vector<TableColumn> table{{"#", false, 3}};
  for (const Column& c : cols) table.push_back({c.head, c.left});
  std::vector<std::vector<std::string>> cells;
  for (const Line& l : lines) {
    cells.push_back({l.last > l.first ? fmt::format("{}-{}", l.first + 1, l.last + 1)
                                      : std::to_string(l.first + 1)});
    cells.back().insert(cells.back().end(), l.cells.begin(), l.cells.end());
  }
  // --wide keeps every layout whole on its line (scripts read them: tests/cli/plan_after_tune.sh).
  print_table(table, cells, o.wide ? std::nullopt : std::optional<std::size_t>(layout_col + 1));
  if (ranks.empty()) print_legend(o, merged);  // the first table's
}

void print_campaign_assumptions(const ModelConfig& model, std::int64_t seq, double tokens,
                                const ClusterSpec& cluster) {
  const double n = static_cast<double>(parameter_count(model));
  fmt::print("campaign: {:.4g} tokens ({:.4g} per parameter), {:.4g} model FLOPs ({:.4g} per token: "
             "6 N_matmul + 12 L s h, plan/flops.hpp); steps = tokens / (global batch x seq), not "
             "rounded\n",
             tokens, tokens / n, tokens * model_flops_per_token(model, seq),
             model_flops_per_token(model, seq));
  if (cluster.has_power())
    fmt::print("energy: devices x {} W per device (power.active_watts of {}) x time; {}the "
               "nodes' CPUs, NICs, switches and cooling not counted\n",
               cluster.active_watts, cluster.source,
               cluster.idle_watts > 0
                   ? fmt::format("idle {} W per device not used (the active average contains "
                                 "the waits); ",
                                 cluster.idle_watts)
                   : std::string());
  else
    fmt::print("energy: unknown (cluster {} has no [power] section)\n", cluster.name);
}

nlohmann::json campaign_assumptions_json(const ModelConfig& model, std::int64_t seq,
                                         double tokens, const ClusterSpec& cluster) {
  nlohmann::json j = {
      {"tokens", tokens},
      {"tokens_per_parameter", tokens / static_cast<double>(parameter_count(model))},
      {"model_flops_per_token", model_flops_per_token(model, seq)},
      {"model_flops", tokens * model_flops_per_token(model, seq)},
      {"active_watts_per_device", cluster.has_power() ? nlohmann::json(cluster.active_watts)
                                                      : nlohmann::json(nullptr)},
      {"idle_watts_per_device", cluster.idle_watts > 0 ? nlohmann::json(cluster.idle_watts)
                                                       : nlohmann::json(nullptr)}};
  return j;
}

nlohmann::json to_json(const Candidate& c, const ClusterSpec& cluster, const ReportOptions& o) {
  nlohmann::json j = to_json(c.prediction);
  j["nodes"] = c.nodes;
  j["world"] = c.prediction.layout.parallel.world();
  j["global_batch"] = c.workload.global_batch;
  j["precision"] = std::string(name_of(c.workload.precision));
  if (o.tokens > 0) {
    const CampaignCost k = campaign_cost(c.workload, cluster, c.prediction, o.tokens);
    j["campaign"] = {{"tokens", k.tokens},
                     {"model_flops", k.model_flops},
                     {"steps", k.steps},
                     {"seconds", k.seconds},
                     {"days", k.days()},
                     {"device_hours", k.device_hours},
                     {"node_hours", k.node_hours},
                     {"energy_j", k.energy_j ? nlohmann::json(*k.energy_j) : nlohmann::json(nullptr)},
                     {"energy_kwh", k.kwh() ? nlohmann::json(*k.kwh()) : nlohmann::json(nullptr)}};
  }
  return j;
}

namespace {

// The layout as run.json writes it (core/parallel_layout_json.hpp) and the planner's own two
// choices, the micro-batch and recomputation.
nlohmann::json layout_to_json(const Layout& l) {
  nlohmann::json j = layout_json(l.parallel);
  j["micro_batch"] = l.micro_batch;
  j["recompute"] = name_of(l.recompute);
  return j;
}

}  // namespace

nlohmann::json to_json(const Prediction& p) {
  const Layout& l = p.layout;
  return {
      {"layout", layout_to_json(l)},
      {"memory_bytes",
       {{"parameters", p.memory.parameters}, {"gradients", p.memory.gradients},
        {"optimizer_state", p.memory.optimizer_state}, {"activations", p.memory.activations},
        {"communication", p.memory.communication}, {"reserved", p.memory.reserved},
        {"total", p.memory.total()}}},
      {"memory_bytes_first_stage",
       {{"parameters", p.first_stage_memory.parameters},
        {"gradients", p.first_stage_memory.gradients},
        {"optimizer_state", p.first_stage_memory.optimizer_state},
        {"activations", p.first_stage_memory.activations},
        {"total", p.first_stage_memory.total()}}},
      {"comm_bytes_per_step_first_stage", p.first_stage_comm_bytes},
      {"fits", p.fits},
      {"step_seconds",
       {{"compute", p.time.compute}, {"tp", p.time.tp}, {"pp", p.time.pp}, {"dp", p.time.dp},
        {"cp", p.time.cp}, {"ep", p.time.ep}, {"bubble", p.time.bubble}, {"optimizer", p.time.optimizer}, {"host", p.time.host},
        {"total", p.time.total()}}},
      {"crosses_nodes",
       {{"tp", p.tp_crosses_nodes}, {"pp", p.pp_crosses_nodes}, {"dp", p.dp_crosses_nodes}}},
      {"gemm_efficiency", p.gemm_efficiency},
      {"tokens_per_s", p.tokens_per_s},
      {"samples_per_s", p.samples_per_s},
      {"mfu", p.mfu},
      {"hfu", p.hfu}};
}

}  // namespace kintsugi::cli
