#pragma once
// A cluster preset read from its file under configs/clusters/ (the file itself, not the copy
// compiled into the program), for the planner's tests.
#include <string>

#include "kintsugi/plan/cluster.hpp"

namespace kintsugi {

inline ClusterSpec cluster_from_file(const std::string& name) {
  return load_cluster(std::string(KINTSUGI_CONFIGS_DIR) + "/clusters/" + name + ".toml");
}

}  // namespace kintsugi
