#pragma once
// A training campaign: a token budget trained with one predicted layout, in the units an
// allocation request asks for (docs/planner.md, "Planning a campaign"):
//   steps         = tokens / (global batch x seq)        (not rounded up: a budget is approximate)
//   seconds       = steps x predicted step time
//   device-hours  = devices x seconds / 3600, node-hours = nodes x seconds / 3600
//   model FLOPs   = tokens x model FLOPs per token (flops.hpp: 6 N_matmul + 12 L s h)
//   energy        = devices x power.active_watts x seconds   (unknown without [power])
// The energy is the Frontier study's estimate (Dash et al.): iteration time, tokens per
// iteration, average active power and the card count. Node power beyond the devices (CPUs,
// NICs, switches, cooling) is not counted.
//
// And the search over several node counts, global batches and precisions: the candidates, the
// objective they are ranked by, and their Pareto front.
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi {

struct CampaignCost {
  double tokens = 0, model_flops = 0, steps = 0, seconds = 0;
  double device_hours = 0, node_hours = 0;
  std::optional<double> energy_j;  // empty: the cluster has no [power]
  double days() const { return seconds / 86400; }
  std::optional<double> kwh() const {
    return energy_j ? std::optional<double>(*energy_j / 3.6e6) : std::nullopt;
  }
};

// `devices_per_node` turns the layout's devices into nodes (a layout fills whole nodes).
CampaignCost campaign_cost(const Workload& w, const ClusterSpec& cluster, const Prediction& p,
                           double tokens);

// One point of a search over node counts, batches and precisions: the workload it ran and its
// prediction.
struct Candidate {
  std::int64_t nodes = 1;
  Workload workload;
  Prediction prediction;
};

// What the search minimises: the step time (one workload's steps compare), the time to train a
// token budget (seconds per token), its energy (joules per token) or its cost in device-hours
// (device-seconds per token). On one cluster energy and device-hours rank alike (both are
// devices x time; the power per device is one constant).
enum class Objective : std::uint8_t { step, time, energy, device_hours };
template <>
struct EnumNames<Objective> {
  static constexpr std::array values = {
      std::pair{Objective::step, "step"}, std::pair{Objective::time, "time"},
      std::pair{Objective::energy, "energy"},
      std::pair{Objective::device_hours, "device-hours"}};
};

double seconds_per_token(const Candidate& c);
double device_seconds_per_token(const Candidate& c);
// Needs the cluster's [power].
double joules_per_token(const Candidate& c, const ClusterSpec& cluster);
double objective_value(const Candidate& c, Objective o, const ClusterSpec& cluster);
// Best first; ties by the smaller memory, then the fewer devices. Energy without [power] is an
// Error.
void rank_candidates(std::vector<Candidate>& c, Objective o, const ClusterSpec& cluster);

// Indices of the candidates no other beats in every one of: seconds per token, devices and
// (with [power]) joules per token; fastest first. A candidate equal to another in all of them
// is kept once (the first).
std::vector<std::size_t> pareto_front(const std::vector<Candidate>& c, const ClusterSpec& cluster);

}  // namespace kintsugi
