#include "kintsugi/plan/refit.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi {

namespace {

// Least squares of the relative residuals for a and b (refit.hpp).
struct Factors {
  double a = 1, b = 1;
  bool comm_fitted = false;
};

Factors fit_factors(const std::vector<Measured>& runs) {
  double cc = 0, cm = 0, mm = 0, ct = 0, mt = 0;
  for (const Measured& r : runs) {
    const TimePrediction& p = r.predicted.time;
    // Relative residuals: a 60 ms layout's 10 ms miss weighs what a 6 ms layout's 1 ms does.
    const double w = 1.0 / (r.seconds * r.seconds);
    const double c = p.compute + p.bubble + p.optimizer, m = p.tp + p.pp + p.dp + p.cp;
    const double t = r.seconds - p.host;
    cc += w * c * c;
    cm += w * c * m;
    mm += w * m * m;
    ct += w * c * t;
    mt += w * m * t;
  }
  Factors f;
  // T - H - M = a C with b = 1. Weights that underflow (a step of 1e308 s) leave nothing to
  // fit: an infinite factor, which the spec check refuses.
  f.a = cc > 0 ? std::max(1e-6, (ct - cm) / cc) : HUGE_VAL;
  // The links are fitted only where one factor leaves a miss the measurements can resolve:
  // larger than a step's own spread.
  double miss = 0, spread = 0;
  for (const Measured& r : runs) {
    const TimePrediction& p = r.predicted.time;
    miss = std::max(miss, std::abs((f.a * (p.compute + p.bubble + p.optimizer) + p.tp + p.pp + p.cp +
                                    p.dp + p.host) / r.seconds - 1));
    spread = std::max(spread, r.noise);
  }
  const double det = cc * mm - cm * cm;
  // The communication part is identifiable only if it varies independently of compute: the
  // two columns must not be (nearly) parallel. However small it is next to compute, a part
  // that differs between layouts of nearly equal compute (sequence parallelism's extra
  // collectives, tensor- against data-parallel traffic) is what tells them apart.
  if (runs.size() >= 2 && miss > spread && mm > 0 && det > 1e-6 * cc * mm) {
    const double a = (ct * mm - mt * cm) / det, b = (mt * cc - ct * cm) / det;
    if (a > 0 && b > 0) {
      f.a = a;
      f.b = b;
      f.comm_fitted = true;
    }
  }
  return f;
}

}  // namespace

double relative_spread(std::vector<double> seconds) {
  if (seconds.size() < 2) return 0;
  std::sort(seconds.begin(), seconds.end());
  auto quantile = [&](double q) {
    const double at = q * static_cast<double>(seconds.size() - 1);
    const auto lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, seconds.size() - 1);
    return seconds[lo] + (at - static_cast<double>(lo)) * (seconds[hi] - seconds[lo]);
  };
  const double median = quantile(0.5);
  return median > 0 ? (quantile(0.75) - quantile(0.25)) / median : 0;
}

bool within_refit_error(double best_seconds, double seconds, double error) {
  if (error >= 1) return true;
  return seconds <= best_seconds * (1 + error) / (1 - error);
}

Refit refit_cluster(const ClusterSpec& cluster, const Workload& w,
                    const std::vector<Measured>& runs) {
  if (runs.empty()) fail("refitting the cost model needs at least one measured layout");
  // A step time that is not a positive finite number (a run whose metrics held none) would
  // make the factors, and the spec written from them, NaN or infinite.
  for (const Measured& r : runs)
    if (!std::isfinite(r.seconds) || r.seconds <= 0 || !std::isfinite(r.predicted.time.total()))
      fail("refitting the cost model needs measured and predicted step times that are positive "
           "finite numbers, got {} s measured against {} s predicted: nothing is refit",
           r.seconds, r.predicted.time.total());
  const Factors best = fit_factors(runs);
  Refit out;
  out.compute_factor = best.a;
  out.comm_factor = best.b;
  out.comm_fitted = best.comm_fitted;
  ClusterSpec c = cluster;
  // An efficiency above 1 is not a fraction of the peak: the excess goes into the peaks (the
  // measured GEMM rate was depressed, e.g. by a busy machine), keeping their product.
  const double efficiency = c.gemm_max_efficiency / out.compute_factor;
  c.gemm_max_efficiency = std::min(1.0, efficiency);
  for (double* peak : {&c.peak_tflops_fp32, &c.peak_tflops_bf16, &c.peak_tflops_fp16})
    *peak *= std::max(1.0, efficiency);
  c.memory_bandwidth_gbs /= out.compute_factor;
  // A measured attention rate times its core outside the GEMM curve: it takes the factor too,
  // or the refit would leave that share of the compute time as it was.
  c.attention_tflops /= out.compute_factor;
  for (LinkSpec* link : {&c.intra_node, &c.inter_node, &c.package}) {
    link->bandwidth_gbs /= out.comm_factor;
    for (double* rate : {&link->all_reduce_gbs, &link->reduce_scatter_gbs, &link->all_gather_gbs})
      *rate /= out.comm_factor;  // 0 (not measured) stays 0
    link->latency_us *= out.comm_factor;
  }
  c.source = cluster.source + " (refit to measured steps)";
  // What the refit cannot explain: each run's error under the refit cluster (the terms that are
  // not linear in a and b, such as the data-parallel overlap, are predicted, not linearized)
  // and each measurement's own spread.
  c.refit_error = 0;
  c.refit_layouts = static_cast<std::int64_t>(runs.size());
  for (const Measured& r : runs) {
    const double predicted = predict(w, c, r.predicted.layout).time.total();
    c.refit_error = std::max({c.refit_error, std::abs(predicted / r.seconds - 1.0), r.noise});
  }
  // What `tune` writes must load again: every field finite and in range (parse_cluster's
  // checks), never a spec that plans 0 us steps.
  try {
    parse_cluster(to_toml(c), c.source);
  } catch (const Error& e) {
    fail("the refit of {} is not a usable cluster spec (compute x {}, links x {}): {}; nothing "
         "is refit",
         cluster.source, out.compute_factor, out.comm_factor, e.what());
  }
  out.cluster = c;
  return out;
}

bool same_shape(const Layout& x, const Layout& y) {
  // What tune does not tell apart (the recomputation, and what the record says places state or
  // times collectives) made equal, the rest compared: a new layout dimension is a difference of
  // shape without an edit here.
  return x.micro_batch == y.micro_batch && same_split(x.parallel, y.parallel);
}

RefitPlan refit_plan(const Workload& w, const ClusterSpec& refit, std::int64_t world,
                     const std::vector<Measured>& runs, const SearchSpace& search) {
  KINTSUGI_ASSERT(!runs.empty());
  const SearchResult plan = search_layouts(w, refit, world, search);
  if (plan.ranked.empty())
    fail("no layout fits the refit cluster {} on {} ranks", refit.source, world);
  RefitPlan out{plan.ranked.front(), std::nullopt, 0, false};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].seconds < runs[out.fastest].seconds) out.fastest = i;
    if (runs[i].predicted.layout == out.top.layout) out.top_run = i;
  }
  out.ties = within_refit_error(out.top.time.total(),
                                predict(w, refit, runs[out.fastest].predicted.layout).time.total(),
                                refit.refit_error);
  out.ranked = plan.ranked.size();
  for (std::size_t i = 1; i < plan.ranked.size(); ++i)
    out.tied_with_top += within_refit_error(out.top.time.total(), plan.ranked[i].time.total(),
                                            refit.refit_error);
  return out;
}

Tuned refit_until_closed(const ClusterSpec& cluster, const Workload& w, std::int64_t world,
                         std::vector<Measured>& runs,
                         const std::function<Measured(const Prediction&)>& measure,
                         std::int64_t extra, const SearchSpace& search) {
  Tuned t{refit_cluster(cluster, w, runs), {}};
  t.plan = refit_plan(w, t.refit.cluster, world, runs, search);
  for (std::int64_t k = 0; k < extra && !t.plan.closes() && !t.plan.top_run; ++k) {
    // Measured with the original cluster's prediction, as the first runs were.
    runs.push_back(measure(predict(w, cluster, t.plan.top.layout)));
    t.refit = refit_cluster(cluster, w, runs);
    t.plan = refit_plan(w, t.refit.cluster, world, runs, search);
  }
  return t;
}

ClusterSpec refit_power(const ClusterSpec& cluster, const std::vector<double>& watts_per_device) {
  if (watts_per_device.empty()) fail("no measured power to refit [power] from");
  double sum = 0;
  for (double w : watts_per_device) {
    if (!(w > 0) || !std::isfinite(w))
      fail("a measured power of {} W per device is not a finite positive number: [power] is "
           "not refit",
           w);
    sum += w;
  }
  ClusterSpec c = cluster;
  c.active_watts = sum / static_cast<double>(watts_per_device.size());
  if (c.idle_watts > c.active_watts) c.idle_watts = 0;
  return c;
}

}  // namespace kintsugi
