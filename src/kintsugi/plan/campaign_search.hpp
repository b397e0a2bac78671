#pragma once
// The search `kintsugi plan` runs over a campaign's axes (docs/planner.md, "Searching a
// campaign"): every node count, global batch and precision, each searched for its layouts
// (search.hpp), the fitting ones ranked by the objective (campaign.hpp) in one list.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kintsugi/plan/campaign.hpp"
#include "kintsugi/plan/critical_batch.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi {

// The largest global batch the search may use: a cap given outright (plan --max-global-batch)
// or, with a loss given, the critical batch at that loss (critical_batch.hpp) where it is
// smaller.
struct BatchLimit {
  std::int64_t sequences = 0;           // 0: no limit
  bool critical_sets_it = false;        // the critical batch is the limit (else the cap, if any)
  std::int64_t critical_sequences = 0;  // 0: no loss given
  double critical_tokens = 0;
  bool allows(std::int64_t batch) const { return sequences == 0 || batch <= sequences; }
};

// `max_global_batch` 0: no cap; `critical_batch_loss` 0: no loss, no critical batch.
BatchLimit batch_limit(std::int64_t max_global_batch, double critical_batch_loss,
                       std::int64_t seq_len, const CriticalBatchFit& fit = {});

// The global batches that the space's micro-batches and accumulation steps make on `world`
// devices, mb x ga x dp for every dp that divides the world (and that the space's dp pins
// allow), within the limit; ascending, without repeats. No micro-batches listed: none.
std::vector<std::int64_t> batches_from_accumulation(const SearchSpace& space,
                                                    std::int64_t world,
                                                    const BatchLimit& limit);

// What the search spans beyond the layout.
struct CampaignAxes {
  std::vector<std::int64_t> nodes, global_batch;
  std::vector<Precision> precision;
  // The global batches are what accumulation makes at each node count
  // (batches_from_accumulation, within `limit`), not `global_batch`.
  bool batches_from_accumulation = false;
  BatchLimit limit;
};

struct CampaignSearch {
  std::vector<Candidate> candidates;  // every fitting layout of every search, best first
  std::vector<Candidate> too_big;     // the smallest that do not fit (up to 5), smallest first
  std::int64_t enumerated = 0, fitting = 0;  // valid layouts and, of them, fitting, summed
  std::int64_t searched = 0;                 // (nodes, global batch, precision) searched
  std::vector<std::int64_t> global_batches;  // the batches searched, ascending, without repeats
  // With more than one search: the Pareto front of the candidates (campaign.hpp), as indices.
  std::vector<std::size_t> front;
  // On a cluster a `tune` refit carried its error on (refit.hpp), with the step time as the
  // objective and one search: how many layouts after #1, in rank order, tie with it.
  std::size_t tied_with_best = 0;
  bool several() const { return searched > 1; }
};

// `first`: the run's workload; each search takes its global batch and precision from the axes.
CampaignSearch search_campaign(const Workload& first, const ClusterSpec& cluster,
                               const CampaignAxes& axes, const SearchSpace& space,
                               Objective objective);

}  // namespace kintsugi
