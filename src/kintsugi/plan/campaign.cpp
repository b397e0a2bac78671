#include "kintsugi/plan/campaign.hpp"

#include <algorithm>
#include <numeric>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

CampaignCost campaign_cost(const Workload& w, const ClusterSpec& cluster, const Prediction& p,
                           double tokens) {
  CampaignCost c;
  const double devices = static_cast<double>(p.layout.parallel.world());
  const double seq = static_cast<double>(w.model.seq_len);
  c.tokens = tokens;
  c.model_flops = tokens * model_flops_per_token(w.model, w.model.seq_len);
  c.steps = tokens / (static_cast<double>(w.global_batch) * seq);
  c.seconds = c.steps * p.time.total();
  c.device_hours = devices * c.seconds / 3600;
  c.node_hours = devices / static_cast<double>(cluster.devices_per_node) * c.seconds / 3600;
  if (cluster.has_power()) c.energy_j = devices * cluster.active_watts * c.seconds;
  return c;
}

double seconds_per_token(const Candidate& c) { return 1 / c.prediction.tokens_per_s; }

double device_seconds_per_token(const Candidate& c) {
  return static_cast<double>(c.prediction.layout.parallel.world()) / c.prediction.tokens_per_s;
}

double joules_per_token(const Candidate& c, const ClusterSpec& cluster) {
  if (!cluster.has_power())
    fail("cluster {} has no [power] section: the energy is unknown (add `[power] active_watts "
         "= ...` to its spec, docs/planner.md)",
         cluster.name);
  return cluster.active_watts * device_seconds_per_token(c);
}

double objective_value(const Candidate& c, Objective o, const ClusterSpec& cluster) {
  switch (o) {
    case Objective::step: return c.prediction.time.total();
    case Objective::time: return seconds_per_token(c);
    case Objective::energy: return joules_per_token(c, cluster);
    case Objective::device_hours: return device_seconds_per_token(c);
  }
  KINTSUGI_ASSERT(false);
}

void rank_candidates(std::vector<Candidate>& c, Objective o, const ClusterSpec& cluster) {
  if (o == Objective::energy && !c.empty()) joules_per_token(c.front(), cluster);  // refuses
  std::vector<double> key(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) key[i] = objective_value(c[i], o, cluster);
  std::vector<std::size_t> order(c.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (key[a] != key[b]) return key[a] < key[b];
    const double ma = c[a].prediction.memory.total(), mb = c[b].prediction.memory.total();
    if (ma != mb) return ma < mb;
    return c[a].prediction.layout.parallel.world() < c[b].prediction.layout.parallel.world();
  });
  std::vector<Candidate> sorted;
  sorted.reserve(c.size());
  for (std::size_t i : order) sorted.push_back(std::move(c[i]));
  c = std::move(sorted);
}

std::vector<std::size_t> pareto_front(const std::vector<Candidate>& c,
                                      const ClusterSpec& cluster) {
  struct Point {
    double time, devices, energy;
    std::size_t index;
  };
  std::vector<Point> points;
  points.reserve(c.size());
  for (std::size_t i = 0; i < c.size(); ++i)
    points.push_back({seconds_per_token(c[i]),
                      static_cast<double>(c[i].prediction.layout.parallel.world()),
                      cluster.has_power() ? joules_per_token(c[i], cluster) : 0.0, i});
  // Sorted by time (then devices, energy), a point is on the front unless one already on it
  // (not slower) is at most as large in devices and energy.
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.devices != b.devices) return a.devices < b.devices;
    return a.energy < b.energy;
  });
  std::vector<Point> front;
  for (const Point& p : points) {
    const bool dominated = std::any_of(front.begin(), front.end(), [&](const Point& f) {
      return f.devices <= p.devices && f.energy <= p.energy;
    });
    if (!dominated) front.push_back(p);
  }
  std::vector<std::size_t> out;
  for (const Point& p : front) out.push_back(p.index);
  return out;
}

}  // namespace kintsugi
