#pragma once
// The training loop of one process: sample the global batch, accumulate gradients over its
// micro-batches, clip by the global norm, take an AdamW step, report, evaluate, and at the end
// save the model and the loss curve.
#include <cstdint>
#include <iosfwd>
#include <string>

#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

struct TrainOptions {
  std::string out_dir;       // metrics.jsonl, loss.svg and model/ go here
  std::string metrics_path;  // overrides out_dir/metrics.jsonl when set
};

struct TrainSummary {
  std::int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double first_val_loss = 0, last_val_loss = 0;
  double tokens_per_s = 0;  // over all steps but the first (warm-up)
  double mfu = 0;
  std::string metrics_path, plot_path, checkpoint_dir;
};

TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log);

}  // namespace kintsugi
