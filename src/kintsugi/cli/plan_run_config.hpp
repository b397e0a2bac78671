#pragma once
// The run config `kintsugi plan --write-config` writes: the plan's best layout as a run that does
// what the plan said (docs/planner.md, "The run config plan writes"): its global batch and
// precision, the cluster's device, the budget's steps, a checkpoint interval, the ramp-up if
// one was asked for, and placeholders for data keys the plan cannot know.
#include <optional>
#include <set>
#include <string>

#include "kintsugi/plan/campaign.hpp"
#include "kintsugi/plan/rampup_suggestion.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi::cli {

// A failure loses at most this much predicted time: train.save_every is the steps it holds
// (at least 1, at most train.steps), unless the config gives train.save_every.
constexpr double kCheckpointEverySeconds = 3600;

struct PlannedRun {
  std::string toml;     // the run config, its header saying what plan set and what is left
  std::string summary;  // one line for the terminal
};

// `base`: the run plan started from, `given` the keys its config and --set gave (given_keys);
// `tokens`: the budget (0: none). The cluster must name its train_device.
PlannedRun planned_run(const RunConfig& base, const std::set<std::string>& given,
                       const Candidate& best, const ClusterSpec& cluster, double tokens,
                       const std::optional<RampupSuggestion>& rampup, const std::string& path);

}  // namespace kintsugi::cli
