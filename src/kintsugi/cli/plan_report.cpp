#include "kintsugi/cli/plan_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kintsugi/plan/flops.hpp"

namespace kintsugi::cli {

namespace {
// Seconds with a unit that keeps three significant digits readable.
std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.2f}s", s);
  if (s >= 1e-3) return fmt::format("{:.1f}ms", s * 1e3);
  return fmt::format("{:.0f}us", s * 1e6);
}

// Joules with an SI prefix (the study's figures: 284 GJ, 17.65 TJ).
std::string joules(double j) {
  const char* prefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  while (i < 6 && j >= 1000) j /= 1000, ++i;
  return fmt::format("{:.4g} {}J", j, prefix[i]);
}

}  // namespace

void print_candidate_table(const std::vector<Candidate>& rows, std::size_t top,
                           const ClusterSpec& cluster, const ReportOptions& o,
                           const std::vector<std::size_t>& ranks) {
  const bool campaign = o.tokens > 0;
  // The # column: 3 wide, or as wide as the largest rank a Pareto table quotes.
  std::size_t width = 3;
  for (std::size_t r : ranks) width = std::max(width, std::to_string(r + 1).size());
  std::string head = fmt::format("{:>{}} ", "#", width);
  if (o.several) head += fmt::format("{:>6} {:>6} {:>5} ", "nodes", "GBS", "prec");
  head += fmt::format(
      "{:<44} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>10} {:>6} {:>6}",
      "layout", "mem GB", "step", "compute", "tp", "pp", "dp", "bubble", "optim", "host",
      "tokens/s", "samples/s", "MFU", "HFU");
  if (campaign)
    head += fmt::format(" {:>9} {:>12} {:>11} {:>12} {:>12}", "days", "device-h", "node-h",
                        "energy", "kWh");
  fmt::print("{}\n", head);
  for (std::size_t i = 0; i < std::min(top, rows.size()); ++i) {
    const Prediction& p = rows[i].prediction;
    std::string line = fmt::format("{:>{}} ", ranks.empty() ? i + 1 : ranks[i] + 1, width);
    if (o.several)
      line += fmt::format("{:>6} {:>6} {:>5} ", rows[i].nodes, rows[i].workload.global_batch,
                          rows[i].workload.precision);
    line += fmt::format(
        "{:<44} {:>8.3g} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11.4g} {:>10.4g} "
        "{:>5.1f}% {:>5.1f}%",
        describe(p.layout), p.memory.total() / 1e9, seconds(p.time.total()),
        seconds(p.time.compute), seconds(p.time.tp), seconds(p.time.pp), seconds(p.time.dp),
        seconds(p.time.bubble), seconds(p.time.optimizer), seconds(p.time.host), p.tokens_per_s,
        p.samples_per_s, 100 * p.mfu, 100 * p.hfu);
    if (campaign) {
      const CampaignCost c = campaign_cost(rows[i].workload, cluster, p, o.tokens);
      line += fmt::format(" {:>9.4g} {:>12.4g} {:>11.4g} {:>12} {:>12}", c.days(), c.device_hours,
                          c.node_hours, c.energy_j ? joules(*c.energy_j) : "unknown",
                          c.kwh() ? fmt::format("{:.4g}", *c.kwh()) : "unknown");
    }
    fmt::print("{}\n", line);
  }
  if (!ranks.empty()) return;  // the legend is the first table's
  fmt::print(
      "\nlayout: tp/pp/dp ranks (grid XxYxZ: the tp ranks as a 3D tensor grid, no-overlap: its "
      "collectives not overlapped),\nmb micro-batch; pipeline schedule (gpipe, 1f1b, interleaved) "
      "with vN model chunks per\nrank; zeroN ZeRO stage; hsdpN ZeRO sharded over groups of N "
      "data-parallel ranks, replicated across groups;\nselective/full activation recomputation; "
      "sp sequence parallelism. mem GB: per device, 1e9 bytes, on the fullest\nstage. Times "
      "per optimizer step: compute, the tp/pp/dp communication not hidden behind it, the "
      "pipeline\nbubble, the optimizer, host overhead. MFU/HFU: model/hardware FLOPs (HFU counts "
      "recomputation) over the peak.\n");
  if (o.several) fmt::print("nodes, GBS (global batch), prec: the run each layout is for.\n");
  if (campaign)
    fmt::print("days, device-h, node-h: wall-clock days and device- and node-hours to train the "
               "token budget; energy (and kWh):\nthe devices' energy over that time, unknown "
               "without the cluster's [power].\n");
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
  j["world"] = c.prediction.layout.world();
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

nlohmann::json to_json(const Prediction& p) {
  const Layout& l = p.layout;
  return {
      {"layout",
       {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"micro_batch", l.micro_batch},
        {"schedule", std::string(name_of(l.schedule))}, {"virtual_stages", l.virtual_stages},
        {"zero", stage_number(l.zero)},
        {"hsdp", l.hsdp},
        {"recompute", name_of(l.recompute)},
        {"sequence_parallel", l.sequence_parallel},
        {"tensor_grid", l.tensor_grid.empty() ? nlohmann::json(nullptr)
                                              : nlohmann::json(l.tensor_grid)},
        {"tensor_grid_overlap", l.grid_overlap}}},
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
        {"bubble", p.time.bubble}, {"optimizer", p.time.optimizer}, {"host", p.time.host},
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
