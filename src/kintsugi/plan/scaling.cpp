#include "kintsugi/plan/scaling.hpp"

#include <algorithm>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

std::vector<ScalingPoint> scaling_curve(const Workload& w, const ClusterSpec& cluster,
                                        const std::vector<std::int64_t>& nodes,
                                        const SearchSpace& space, Scaling kind) {
  std::vector<std::int64_t> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  std::vector<ScalingPoint> out;
  for (std::int64_t n : sorted) {
    ScalingPoint p;
    p.nodes = n;
    p.devices = n * cluster.devices_per_node;
    p.global_batch = w.global_batch;
    if (kind == Scaling::weak) {
      if (w.global_batch * n % sorted.front() != 0)
        fail("weak scaling from {} nodes: the global batch {} x {} / {} is not a whole number "
             "of sequences; choose node counts that are multiples of the first",
             sorted.front(), w.global_batch, n, sorted.front());
      p.global_batch = w.global_batch * n / sorted.front();
    }
    Workload at = w;
    at.global_batch = p.global_batch;
    SearchResult r = search_layouts(at, cluster, p.devices, space);
    if (!r.ranked.empty()) {
      p.best = r.ranked.front();
      p.tokens_per_s_per_device = p.best->tokens_per_s / static_cast<double>(p.devices);
      p.model_tflops_per_device = p.best->mfu * cluster.peak_tflops(w.precision);
    }
    out.push_back(std::move(p));
  }
  // The first point with a layout is the reference.
  const auto base = std::find_if(out.begin(), out.end(), [](const ScalingPoint& p) { return p.best.has_value(); });
  if (base != out.end())
    for (ScalingPoint& p : out)
      if (p.best) p.efficiency = p.tokens_per_s_per_device / base->tokens_per_s_per_device;
  return out;
}

}  // namespace kintsugi
