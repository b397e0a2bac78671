#include "kintsugi/plan/refit.hpp"

#include <algorithm>
#include <cmath>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

Refit refit_cluster(const ClusterSpec& cluster, const std::vector<Measured>& runs) {
  if (runs.empty()) fail("refitting the cost model needs at least one measured layout");
  // A step time that is not a positive finite number (a run whose metrics held none) would
  // make the factors, and the spec written from them, NaN or infinite.
  for (const Measured& r : runs)
    if (!std::isfinite(r.seconds) || r.seconds <= 0 || !std::isfinite(r.predicted.time.total()))
      fail("refitting the cost model needs measured and predicted step times that are positive "
           "finite numbers, got {} s measured against {} s predicted: nothing is refit",
           r.seconds, r.predicted.time.total());
  double cc = 0, cm = 0, mm = 0, ct = 0, mt = 0;
  for (const Measured& r : runs) {
    const TimePrediction& t = r.predicted.time;
    const double c = t.compute + t.bubble + t.optimizer, m = t.tp + t.pp + t.dp;
    cc += c * c;
    cm += c * m;
    mm += m * m;
    ct += c * r.seconds;
    mt += m * r.seconds;
  }
  Refit out;
  const double det = cc * mm - cm * cm;
  // The communication part is identifiable only if it varies independently of compute.
  if (runs.size() >= 2 && mm > 1e-3 * cc && det > 1e-9 * cc * mm) {
    const double a = (ct * mm - mt * cm) / det, b = (mt * cc - ct * cm) / det;
    if (a > 0 && b > 0) {
      out.compute_factor = a;
      out.comm_factor = b;
      out.comm_fitted = true;
    }
  }
  if (!out.comm_fitted) {
    // T - M = a C with b = 1.
    out.compute_factor = std::max(1e-6, (ct - cm) / cc);
  }
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
