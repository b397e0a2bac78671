#pragma once
// The training loop of one rank: sample this rank's part of the global batch, accumulate
// gradients over its micro-batches (tensor-parallel collectives inside the model, data-parallel
// buckets reduced while backward runs), clip by the global norm, take an AdamW step, report,
// evaluate, save training checkpoints (every train.save_every steps, and when SIGTERM or SIGINT
// asks the job to stop), and at the end save the model and the loss curve. Rank 0 speaks for
// the job.
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kintsugi/train/init_weights.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"

#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

struct TrainOptions {
  std::string out_dir;       // metrics.jsonl, loss.svg and model/ go here
  std::string metrics_path;  // overrides out_dir/metrics.jsonl when set
  std::string trace_path;    // Chrome trace JSON of the last step's events, when set
  // A checked training checkpoint to continue from (inspect_checkpoint; every rank passes the
  // same one): the run goes on at its step with its weights, optimizer and loss-scaler state.
  std::optional<CheckpointInfo> resume;
  // Otherwise, initial weights instead of random ones (--init-from, init_weights.hpp: Hugging
  // Face weights or a kintsugi run's model/ or training checkpoint). Weights only
  // (fine-tuning): the run starts at step 0 with zero optimizer state and the learning-rate
  // schedule from its start.
  std::shared_ptr<const InitialWeights> init;
  // Ranks of this job on this rank's node: on the CPU they share its cores, and the MFU peak
  // counts the cores the job has, not one full rate per rank.
  int ranks_per_node = 1;
  // The identity of the data's tokenizer (data::to_json of a TokenizerIdentity; null: not
  // known), recorded in model/ and every training checkpoint (tokenizer_identity.hpp).
  nlohmann::json tokenizer;
  // Faults to inject (the fault and pre-emption tests; `kintsugi train` takes them from the
  // KINTSUGI_TEST_* switches): none by default.
  FaultHooks faults;
};

struct TrainSummary {
  std::int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double first_val_loss = 0, last_val_loss = 0;
  double tokens_per_s = 0;  // over all steps but the first (warm-up)
  double mfu = 0;
  std::string metrics_path, plot_path, checkpoint_dir;
  std::string last_train_checkpoint;  // the newest training checkpoint written, if any
  bool stopped = false;               // SIGTERM/SIGINT: saved and stopped early
};

// The run's data, opened and checked (kintsugi::Error on a missing or corrupt file) before any
// work, so that every rank of a job can agree on the verdict first. No validation data: no
// evaluation.
struct TrainInputs {
  data::BatchSampler train;
  std::optional<data::BatchSampler> val;
};
TrainInputs open_inputs(const RunConfig& config);

// `topology` is null for a single process; otherwise config.parallel must match it
// (resolve_layout) and every rank of the job calls train.
TrainSummary train(const RunConfig& config, TrainInputs inputs, const TrainOptions& options,
                   std::ostream& log, const Topology* topology = nullptr);
// One process: opens the inputs itself.
TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log);

}  // namespace kintsugi
