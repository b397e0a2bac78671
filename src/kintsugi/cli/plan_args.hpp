#pragma once
// `kintsugi plan`'s flags as given (PlanArgs), and read into what its search needs (PlanInputs):
// the run, the cluster, the search's axes and space. Every bad value is refused naming its flag.
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/cli/cluster_choice.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/plan/campaign_search.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi::cli {

struct PlanArgs {
  std::string model, config, cluster = "local", grad_precision, write_config;
  std::string attention, pipeline_p2p, device, objective, scaling, plot;
  std::vector<std::string> overrides, recompute, precision;
  // The layout pins, named as train's flags (cli/layout_flags.hpp), and the other lists or
  // ranges (plan/value_list.hpp): parsed in read_plan_inputs, so a bad value names its option.
  LayoutFlagValues pins;
  std::string nodes = "1", global_batch, micro_batch, grad_accum;
  std::int64_t ranks = 0, seq = 0, max_global_batch = 0, max_nodes = 0, top = 10;
  // 0: not given (positive_number refuses a 0, negative or non-finite value on the command line).
  double tokens = 0, tokens_per_param = 0;
  double critical_batch_loss = 0;  // no critical-batch limit (plan/critical_batch.hpp)
  double rampup_tokens = 0;        // no ramp-up suggested (plan/rampup_suggestion.hpp)
  bool json = false, wide = false, memory = false, tp_across_nodes = false;
};

// What the flags ask the search for.
struct PlanInputs {
  // The run the plan is for: a run config (--config) or a preset (--model), with --seq and
  // --grad-precision applied; the global batch and the precision are the axes'.
  RunConfig base;
  CampaignAxes axes;
  SearchSpace space;
  Objective objective = Objective::step;
  Workload first;  // the run's workload at the axes' first global batch and precision
  ChosenCluster chosen;
};

// The flags read and checked, in the order a user meets them, and the cluster chosen (the local
// one measured): --plot, --write-config's path, the run, the batch limit, the axes, the pins.
PlanInputs read_plan_inputs(const PlanArgs& a);

// The token budget of --tokens or --tokens-per-param (0: none).
double token_budget(const PlanArgs& a, const ModelConfig& model);

// The global batches and limit as the flags named them, for messages ("--global-batch 256,512",
// "--max-global-batch 128", "--critical-batch-loss 3 (its critical batch, ...)").
std::string list_text(const std::vector<std::int64_t>& v);
std::string batch_limit_source(const PlanArgs& a, const BatchLimit& limit, std::int64_t seq_len);

}  // namespace kintsugi::cli
