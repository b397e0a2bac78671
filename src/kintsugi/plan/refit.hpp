#pragma once
// Refitting the cost model to measured steps (`kintsugi tune`, docs/planner.md "What the refit
// fits, and what it cannot").
//
// Each measured layout i gives a step time T_i and the model's prediction, split into a
// compute-side part C_i (compute + bubble + optimizer: what the GEMM efficiency and the memory
// bandwidth set), a communication part M_i (tp + pp + dp: what the links set) and the host's
// fixed part H_i. Least squares of the relative residuals (weights 1 / T_i^2),
//   T_i - H_i ~ a C_i + b M_i,   a, b > 0
// gives the factors by which the cluster is slower (> 1) or faster than its spec; the refit
// cluster divides gemm.max_efficiency, the memory bandwidth and a measured attention rate by a,
// and the link bandwidths by b (latencies times b). b is fitted whenever the communication part
// varies between the layouts independently of compute, however small it is: the top layouts
// `tune` measures have nearly equal compute, and what sets them apart is their collectives
// (tensor- against data-parallel traffic, sequence parallelism's extra ones), whose cost on a
// loaded or oversubscribed machine is far above what the links' bandwidth and latency say.
// When the layouts do not separate the two parts (a singular or non-positive solution), or a
// alone already predicts every step within the measurements' spread (a finer fit would fit their
// noise), only a is fitted, with b = 1.
//
// What two factors cannot explain remains: the refit's error E, the largest of each measured
// layout's relative error under the refit cluster and each measurement's own spread
// (interquartile range of its timed steps over their median). Every measured time lies within
// a factor 1 +- E of its refit prediction, so layouts whose refit predictions are within a
// factor (1 + E) / (1 - E) of each other cannot be ordered: they tie (within_refit_error). The
// refit cluster carries E and the number of layouts measured ([refit]), for `plan` to say so.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/cost_model.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi {

struct Measured {
  Prediction predicted;
  double seconds = 0;  // measured step time
  double noise = 0;    // relative spread of the timed steps (IQR / median); 0: not known
};

struct Refit {
  double compute_factor = 1, comm_factor = 1;
  bool comm_fitted = false;
  ClusterSpec cluster;  // cluster.refit_error: E above
};

// `w`: the workload the runs trained (for the refit cluster's predictions of them).
Refit refit_cluster(const ClusterSpec& cluster, const Workload& w,
                    const std::vector<Measured>& runs);

// The relative interquartile range of step times (linear interpolation between order
// statistics), 0 for fewer than two.
double relative_spread(std::vector<double> seconds);

// Whether a layout predicted to take `seconds` ties with one predicted to take `best_seconds`
// under a refit of error `error` (above): their ranges of possible measured times overlap.
// Without a refit (error 0) only equal predictions tie.
bool within_refit_error(double best_seconds, double seconds, double error);

// Layouts `tune` tells apart: the same shape (every dimension of the layout record and the
// micro-batch) differs only in recomputation, ZeRO stage or sharding group, rank order, stage
// split or the grid's overlap, which the model predicts nearly equal and which would measure
// the same engine.
bool same_shape(const Layout& x, const Layout& y);

// What the plan on a refit cluster ranks first, against the fastest measured run.
struct RefitPlan {
  Prediction top;                      // the refit plan's #1 over every layout of `world` ranks
  std::optional<std::size_t> top_run;  // the measured run of this very layout, if any
  std::size_t fastest = 0;             // the fastest measured run
  bool ties = false;  // the fastest run's refit prediction ties with #1's (within_refit_error)
  // Of the refit plan's `ranked` fitting layouts, how many after #1 tie with it: most of them on
  // a loaded machine, whose spread makes the error wide (tune says so).
  std::size_t tied_with_top = 0, ranked = 0;
  // Plan -> tune -> plan closes: the plan ranks first what was measured fastest, or says the
  // two tie.
  bool closes() const { return top_run == fastest || ties; }
};
// `search` is the space searched (tune's: grids only where the device runs them).
RefitPlan refit_plan(const Workload& w, const ClusterSpec& refit, std::int64_t world,
                     const std::vector<Measured>& runs, const SearchSpace& search = {});

// `tune`'s refit: refit_cluster, then, while the refit plan's #1 is a layout that was not
// measured and that does not tie with the measured fastest, `measure` it (appended to `runs`)
// and refit again, at most `extra` times. A measured #1 always closes: every measured time is
// within the refit's error of its prediction (refit_cluster).
struct Tuned {
  Refit refit;
  RefitPlan plan;
};
Tuned refit_until_closed(const ClusterSpec& cluster, const Workload& w, std::int64_t world,
                         std::vector<Measured>& runs,
                         const std::function<Measured(const Prediction&)>& measure,
                         std::int64_t extra, const SearchSpace& search = {});

// The cluster's [power] refit to measured power (docs/energy.md): active_watts becomes the mean
// of `watts_per_device` (each measured run's median over its steps of the job's joules per
// second over its devices); idle_watts stays where it is at most the new active_watts and is
// dropped otherwise (a datasheet idle above a measured step's draw describes another device).
// kintsugi::Error on an empty list or a value that is not a finite positive number.
ClusterSpec refit_power(const ClusterSpec& cluster, const std::vector<double>& watts_per_device);

}  // namespace kintsugi
