#include "kintsugi/plan/campaign_search.hpp"

#include <algorithm>

#include "kintsugi/plan/refit.hpp"

namespace kintsugi {

BatchLimit batch_limit(std::int64_t max_global_batch, double critical_batch_loss,
                       std::int64_t seq_len, const CriticalBatchFit& fit) {
  BatchLimit limit{.sequences = max_global_batch};
  if (critical_batch_loss <= 0) return limit;
  limit.critical_sequences = critical_batch_sequences(critical_batch_loss, seq_len, fit);
  limit.critical_tokens = critical_batch_tokens(critical_batch_loss, fit);
  if (limit.sequences == 0 || limit.critical_sequences < limit.sequences) {
    limit.sequences = limit.critical_sequences;
    limit.critical_sets_it = true;
  }
  return limit;
}

std::vector<std::int64_t> batches_from_accumulation(const SearchSpace& space,
                                                    std::int64_t world,
                                                    const BatchLimit& limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t dp = 1; dp <= world; ++dp) {
    if (world % dp != 0 || !space.pins.allows("dp", std::to_string(dp))) continue;
    for (std::int64_t mb : space.micro_batch)
      for (std::int64_t ga : space.grad_accum) {
        const std::int64_t b = mb * ga * dp;
        if (limit.allows(b) && std::find(out.begin(), out.end(), b) == out.end())
          out.push_back(b);
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One search of a (nodes, global batch, precision), its results appended.
void search_one(Workload w, std::int64_t nodes, std::int64_t world, const ClusterSpec& cluster,
                const SearchSpace& space, CampaignSearch& out) {
  SearchResult r = search_layouts(w, cluster, world, space);
  ++out.searched;
  out.enumerated += r.enumerated;
  out.fitting += r.fitting;
  for (Prediction& p : r.ranked) out.candidates.push_back({nodes, w, std::move(p)});
  for (Prediction& p : r.too_big) out.too_big.push_back({nodes, w, std::move(p)});
}

std::size_t count_tied_with_best(const std::vector<Candidate>& ranked,
                                 const ClusterSpec& cluster) {
  std::size_t ties = 0;
  while (ties + 1 < ranked.size() &&
         within_refit_error(ranked.front().prediction.time.total(),
                            ranked[ties + 1].prediction.time.total(), cluster.refit_error))
    ++ties;
  return ties;
}

}  // namespace

CampaignSearch search_campaign(const Workload& first, const ClusterSpec& cluster,
                               const CampaignAxes& axes, const SearchSpace& space,
                               Objective objective) {
  CampaignSearch out;
  std::vector<std::int64_t>& seen = out.global_batches;
  for (std::int64_t nodes : axes.nodes) {
    const std::int64_t world = cluster.devices_per_node * nodes;
    const std::vector<std::int64_t> batches =
        axes.batches_from_accumulation ? batches_from_accumulation(space, world, axes.limit)
                                       : axes.global_batch;
    for (std::int64_t batch : batches) {
      if (std::find(seen.begin(), seen.end(), batch) == seen.end()) seen.push_back(batch);
      for (Precision precision : axes.precision) {
        Workload w = first;
        w.global_batch = batch;
        w.precision = precision;
        search_one(w, nodes, world, cluster, space, out);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  rank_candidates(out.candidates, objective, cluster);
  std::stable_sort(out.too_big.begin(), out.too_big.end(),
                   [](const Candidate& x, const Candidate& y) {
                     return x.prediction.memory.total() < y.prediction.memory.total();
                   });
  if (out.too_big.size() > 5) out.too_big.resize(5);
  if (out.several()) out.front = pareto_front(out.candidates, cluster);
  if (cluster.refit_layouts > 0 && objective == Objective::step && !out.several())
    out.tied_with_best = count_tied_with_best(out.candidates, cluster);
  return out;
}

}  // namespace kintsugi
