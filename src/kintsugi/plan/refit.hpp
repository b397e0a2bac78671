#pragma once
// Refitting the cost model's efficiency terms to measured steps (`kintsugi tune`).
//
// Each measured layout i gives a step time T_i and the model's prediction, split into a
// compute-side part C_i (compute + bubble + optimizer: what the GEMM efficiency and the memory
// bandwidth set) and a communication part M_i (tp + pp + dp: what the links set). Least squares
//   T_i ~ a C_i + b M_i,   a, b > 0
// gives the factors by which the cluster is slower (> 1) or faster than its spec; the refit
// cluster divides gemm.max_efficiency, the memory bandwidth and a measured attention rate by a,
// and the link bandwidths by b (latencies times b). When the layouts do not separate the two
// parts (M all ~0, or a singular or non-positive solution), only a is fitted, with b = 1.
#include <vector>

#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi {

struct Measured {
  Prediction predicted;
  double seconds = 0;  // measured step time
};

struct Refit {
  double compute_factor = 1, comm_factor = 1;
  bool comm_fitted = false;
  ClusterSpec cluster;
};

Refit refit_cluster(const ClusterSpec& cluster, const std::vector<Measured>& runs);

// The cluster's [power] refit to measured power (docs/energy.md): active_watts becomes the mean
// of `watts_per_device` (each measured run's median over its steps of the job's joules per
// second over its devices); idle_watts stays where it is at most the new active_watts and is
// dropped otherwise (a datasheet idle above a measured step's draw describes another device).
// kintsugi::Error on an empty list or a value that is not a finite positive number.
ClusterSpec refit_power(const ClusterSpec& cluster, const std::vector<double>& watts_per_device);

}  // namespace kintsugi
