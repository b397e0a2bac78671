#pragma once
// What a run is, for people and programs: the log's description of its numerics and layout,
// the layout recorded in checkpoint manifests, and run.json with the communication
// (plan/comm_volume.hpp) and memory (plan/memory.hpp) the theory expects of rank 0 -- the
// numbers the tests hold the runtime's counters to.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kintsugi/train/place.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/stage_model.hpp"

namespace kintsugi {

// "bf16 with f32 master weights, f32 gradients, recompute selective".
std::string describe_numerics(const RunConfig& config);
// "8 ranks = tp 2 x dp 2 x pp 2 (order tp-dp-pp), schedule 1f1b, blocks per chunk [2 2]".
std::string describe_layout(const RunConfig& config, const Place& place, const StageModel& model);
// The layout as checkpoint manifests record it.
nlohmann::json layout_json(const RunConfig& config, const Place& place);
// Bytes rank 0 should send per step, per "group.operation".
std::map<std::string, double> expected_comm_bytes(const RunConfig& config, const Place& place,
                                                  const StageModel& model);
void write_run_description(const std::filesystem::path& path, const RunConfig& config,
                           const Place& place, const StageModel& model);

}  // namespace kintsugi
