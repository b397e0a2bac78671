#include "kintsugi/cli/cluster_choice.hpp"

#include <fmt/format.h>

#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/local_device_cluster.hpp"

namespace kintsugi::cli {

ChosenCluster choose_cluster(const std::string& name, Device device, std::int64_t ranks,
                             const Workload& w) {
  if (name != "local" || device == Device::cpu) return {load_cluster(name, ranks), {}};
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
