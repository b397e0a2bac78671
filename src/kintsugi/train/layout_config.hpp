#pragma once
// Between the planner and the runtime: the workload a run config describes, and a layout
// written back as a ready run config (`kintsugi plan --write-config`, `kintsugi tune`).
#include <string>

#include "kintsugi/plan/cost_model.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

Workload workload_of(const RunConfig& config);
// The layout a run config asks for (parallel.dp must be resolved).
Layout layout_of(const RunConfig& config);
// A TOML run config: every key of `base`, with the layout's parallel, micro-batch and
// recompute keys; loads with load_run_config and needs tp x pp x dp ranks.
std::string layout_config_toml(const RunConfig& base, const Layout& layout);

}  // namespace kintsugi
