#pragma once
// The cluster spec `plan` and `tune` start from: a preset or TOML file, the `local` cluster of
// this machine's cores (load_cluster), or with a device other than the CPU the `local` cluster
// of that device (--device cuda: this machine's GPUs), measured for the run being planned
// (plan/local_device_cluster.hpp), with notes on what was measured and what was not.
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/core/device.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi::cli {

struct ChosenCluster {
  ClusterSpec spec;
  std::vector<std::string> notes;
};

// `ranks`: the local cluster's (0: one per core on the CPU, one per visible device otherwise).
// `device` matters only for `local`.
ChosenCluster choose_cluster(const std::string& name, Device device, std::int64_t ranks,
                             const Workload& workload);

void print_notes(const std::vector<std::string>& notes);

}  // namespace kintsugi::cli
