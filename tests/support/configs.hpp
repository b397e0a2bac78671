#pragma once
// The repository's configs in tests: a cluster preset by name (a file of configs/clusters/,
// named without .toml), and what load_run_config says of a set of overrides.
#include <string>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/train/run_config.hpp"
#include "support/test_paths.hpp"

namespace kintsugi::testing {

inline ClusterSpec cluster_preset(const std::string& name) {
  return load_cluster(configs_dir() + "/clusters/" + name + ".toml");
}

// The message of the error that `--set` overrides alone (no config file) get, "" when accepted.
inline std::string run_config_error(const std::vector<std::string>& overrides) {
  try {
    load_run_config("", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kintsugi::testing
