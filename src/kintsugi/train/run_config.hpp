#pragma once
// A training run's configuration: a TOML file plus `--set key=value` overrides. Every key is
// declared once in run_config_keys.cpp with its documentation; unknown keys are errors (a typo
// must never silently fall back to a default). docs/config.md lists them all. Reading is in
// run_config.cpp, the checks in run_config_checks.cpp, writing back in run_config_writer.cpp.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/device.hpp"
#include "kintsugi/core/precision.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/optim/optimizer.hpp"
#include "kintsugi/core/parallel_layout.hpp"
#include "kintsugi/parallel/layout_rules.hpp"

namespace kintsugi {

// One dataset of a blend: data.train = [{ path = "...", weight = 0.7, val = "..." }, ...].
struct DataSource {
  std::string path;
  double weight = 1;
  std::string val;  // its validation data ("": none)
};

struct DataConfig {
  std::string train = "data/brown/train.bin";  // token file or Megatron dataset
  std::string val = "data/brown/val.bin";      // "": no validation data, evaluation skipped
  std::string tokenizer = "data/gpt2-tokenizer";
  std::vector<DataSource> blend;  // data.train given as a list: these datasets instead of `train`
  // Attention does not cross an end of document inside a window and positions restart after it
  // (Megatron-LM's reset-attention-mask and reset-position-ids).
  bool document_attention = false;
  std::int64_t eod_id = -1;  // the id that ends a document (-1: data.tokenizer's end id)
};

struct TrainConfig {
  std::int64_t steps = 100;
  std::int64_t global_batch = 16;  // sequences per optimizer step
  std::int64_t micro_batch = 2;    // sequences per forward/backward
  // Batch-size ramp-up [start, increment, samples] (empty: none) and the learning-rate rule
  // tied to the ramped batch: "none", "sqrt" or "linear" (train/batch_rampup.hpp).
  std::vector<std::int64_t> batch_rampup;
  std::string batch_lr_rule = "none";
  double lr = 6e-4;
  double min_lr = 6e-5;
  std::int64_t warmup_steps = 10;
  std::int64_t decay_steps = 0;  // 0: train.steps (lr_schedule_of)
  LrShape lr_schedule = LrShape::cosine;
  double lr_decay_fraction = 0.2;  // wsd: the share of decay_steps spent decaying
  OptimizerKind optimizer = OptimizerKind::adamw;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;
  // Mixture of experts (docs/moe.md): the load-balancing loss (Switch/GShard) and the router
  // z-loss of every MoE layer, added to the objective with these coefficients.
  double moe_aux_loss_coeff = 0.01;
  double moe_z_loss_coeff = 0.0;
  // Tracked bytes a rank may hold, in GiB (0: no limit): a run that needs more is refused
  // when it allocates, before its first step.
  double max_memory_gb = 0;
  std::int64_t seed = 1234;
  std::int64_t eval_every = 50;  // 0: only at the end
  std::int64_t eval_sequences = 16;  // validation windows per evaluation (eval_sequences_of)
  std::int64_t eval_batches = 0;     // deprecated: > 0 means eval_batches x micro_batch windows
  std::int64_t log_every = 1;
  std::int64_t threads = 0;  // 0: all cores
  Device device = Device::cpu;
  Recompute recompute = Recompute::none;  // activation recomputation
  Precision precision = Precision::fp32;  // weights and activations
  GradPrecision grad_precision = GradPrecision::fp32;
  double loss_scale = 65536;            // fp16: initial dynamic loss scale
  std::int64_t loss_scale_window = 1000;  // fp16: clean steps before the scale doubles
  bool save_checkpoint = true;
  std::int64_t save_every = 0;        // training checkpoint every this many steps (0: none)
  std::int64_t keep_checkpoints = 3;  // newest training checkpoints kept (0: all)
};

struct MetricsConfig {
  double peak_gflops = 0;  // 0: the GEMM rate `kintsugi bench gemm` measures on this machine
  std::string tensorboard_dir;  // TensorBoard event files go here (empty: none)
};

struct CommConfig {
  double timeout_s = 600;  // deadline of every communication wait, then the job ends
  double deadlock_check_s = 2;  // rank 0 looks for a certain deadlock after waiting this long
  CommBackend backend = CommBackend::automatic;  // what moves GPU tensors: NCCL or MPI
  double bucket_mib = 25;  // data-parallel gradient bucket size (the key parallel.bucket_mib)
};

struct RunConfig {
  ModelConfig model = model_preset("gpt-tiny");
  DataConfig data;
  TrainConfig train;
  ParallelLayout parallel{.dp = 0};  // parallel.dp = 0: world size / (tp pp), resolve_layout
  MetricsConfig metrics;
  CommConfig comm;
  std::string source;  // where it came from, for messages
};

// Reads `path` (empty: defaults only), applies overrides "section.key=value", validates.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The keys ("section.key") that the file and the overrides give explicitly, defaults aside (for
// a model that comes from elsewhere: hf_init.hpp). Call after load_run_config has accepted them.
std::set<std::string> given_keys(const std::string& path, const std::vector<std::string>& overrides);
// Every key of `config` as TOML that load_run_config reads back to the same config.
std::string run_config_toml(const RunConfig& config);
void validate(const RunConfig& config);
// Checks the layout against the job's rank count and the model (layout_problem; every rank
// reaches the same verdict), and what the device and precision can train of the model (a
// mixture of experts: CPU and fp32 only, docs/moe.md), and resolves parallel.dp = 0 to the
// world size / (tp * pp).
void resolve_layout(RunConfig& config, int world_size);
// The layout and batch of a config, as the rule book (layout_rules.hpp) reads them.
LayoutSpec layout_spec(const RunConfig& config);

// The learning-rate schedule a config means. Unset keys follow train.steps: decay_steps = 0
// decays to the last step, and a warm-up longer than such a run is shortened to it (only keys the
// user set can conflict, and validate() refuses those).
LrSchedule lr_schedule_of(const TrainConfig& train);
// Validation windows per evaluation: train.eval_sequences, or the deprecated
// train.eval_batches x train.micro_batch where eval_batches is set.
std::int64_t eval_sequences_of(const TrainConfig& train);
// What lr_schedule_of changed that the user should hear about, as log lines (none: nothing).
std::vector<std::string> config_notes(const RunConfig& config);

// A key whose value differs between two configs, each value as the config file writes it.
struct ConfigChange {
  std::string key, before, after;
};
// Every key (the same table as the file's; data.train's blend as one list) whose value in
// `after` differs from `before`'s, in the table's order.
std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after);

struct ConfigKeyDoc {
  std::string key, type, default_value, doc;
};
// Every key with its type, default and meaning (for --help and the docs test).
std::vector<ConfigKeyDoc> run_config_keys();

}  // namespace kintsugi
