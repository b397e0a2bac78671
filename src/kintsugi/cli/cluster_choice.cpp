#include "kintsugi/cli/cluster_choice.hpp"

#include <fmt/format.h>

#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/local_device_cluster.hpp"

namespace kintsugi::cli {

ChosenCluster choose_cluster(const std::string& name, Device device, std::int64_t ranks,
                             const Workload& w) {
  if (name != "local") {
    ClusterSpec spec = load_cluster(name);
    // --ranks names the local cluster's rank count. A spec file (such as the one `tune` refits
    // from the local cluster) fixes its devices per node: the same count is the plan it was
    // made for, another one would need peaks the spec does not have.
    if (ranks > 0 && ranks != spec.devices_per_node)
      fail("--ranks {}: cluster {} has {} devices per node (its peaks are per device of that "
           "node): plan it with --ranks {} or --nodes N, or refit a spec for {} ranks "
           "(`kintsugi tune --ranks {}`)",
           ranks, spec.name, spec.devices_per_node, spec.devices_per_node, ranks, ranks);
    return {std::move(spec), {}};
  }
  if (device == Device::cpu) return {load_cluster(name, ranks), {}};
  const LocalDeviceOptions options{
      .ranks = ranks,
      .precision = w.precision,
      .attention = attention_shape_of(w.model, representative_sequences(w.model))};
  LocalDeviceCluster local = measure_local_device_cluster(device, options);
  return {std::move(local.spec), std::move(local.notes)};
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& note : notes) fmt::print("note: {}\n", note);
}

}  // namespace kintsugi::cli
