#pragma once
// What one optimizer step reports: the step log line, one JSON object per step in the metrics
// file (keys documented in docs/metrics.md), and the summary at the end of a run.
#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kintsugi/core/memory.hpp"

namespace kintsugi {

struct StepMetrics {
  std::int64_t step = 0;  // 1-based: the number of optimizer steps taken
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_seconds = 0;
  double elapsed_seconds = 0;    // since the run (or this resumed part of it) started
  std::int64_t tokens_seen = 0;  // training tokens of every step so far, resumed ones included
  std::int64_t samples_seen = 0;  // training sequences likewise (tokens_seen / seq_len)
  std::int64_t global_batch = 0;  // sequences of this step (a batch ramp-up's, else the config's)
  double tokens_per_s = 0;
  double model_tflops = 0;  // achieved model TFLOP/s (plan/flops.hpp)
  double mfu = 0;           // model_tflops / peak
  double hfu = 0;           // hardware FLOPs (recomputation included) / peak
  // fp16: the loss scale of the step, and whether its gradient overflowed and it was skipped.
  std::optional<double> loss_scale;
  bool skipped = false;
  std::optional<double> val_loss;
  std::array<std::size_t, kMemoryKinds> memory_current{};
  std::array<std::size_t, kMemoryKinds> memory_peak{};
  // Bytes this rank sent during the step, per "group.operation" (e.g. "dp.all_reduce").
  std::map<std::string, std::uint64_t> comm_bytes;
  // The theory of the terms that depend on the step's data (expert parallelism's all-to-all,
  // from the rows this rank's routing sent and received: plan/comm_volume.hpp), per key of
  // comm_bytes; the run's other terms are in run.json's comm_bytes_per_step_theory.
  std::map<std::string, double> comm_bytes_theory;
  // Pipeline parallelism: the fraction of the step rank 0 did not compute (the bubble and
  // everything else outside forward and backward), and the most micro-batches whose
  // activations it held at once.
  std::optional<double> bubble;
  int activations_in_flight = 0;
  // Measured energy, the job's devices summed (train/job_energy.hpp): the joules since the last
  // step that carried any (this step's, where the counters advance faster than steps end), the
  // seconds they cover, and joules per training token over the steps they cover; none where no
  // counter is readable or none has advanced since.
  std::optional<double> energy_j;
  std::optional<double> energy_seconds;
  std::optional<double> joules_per_token;
  // Training tokens drawn from each dataset so far, by path (a blend of data.train).
  std::map<std::string, std::int64_t> dataset_tokens;
  // Mixture of experts (docs/moe.md): the load-balancing loss and the router z-loss, each the
  // mean over MoE layers of its mean over the step's micro-batches (unweighted: the objective
  // adds each layer's times train.moe_aux_loss_coeff and train.moe_z_loss_coeff), and per MoE
  // layer the routed rows (token choices) of the step's most loaded expert and the mean over
  // experts (max / mean is 1 when balanced).
  std::optional<double> moe_aux_loss, moe_z_loss;
  std::vector<std::pair<double, double>> moe_load;  // [layer]: max, mean
  // Capacity factor (model.moe_capacity_factor): the routed choices of the step dropped past
  // their expert's capacity, over all of them (every layer and rank); none when dropless.
  std::optional<double> moe_dropped_fraction;
  // Auxiliary-loss-free balancing (model.moe_router_bias_update_rate > 0): the largest
  // |bias| of any layer and expert after the step.
  std::optional<double> moe_router_bias_max_abs;
};

nlohmann::json to_json(const StepMetrics& m);
// The same values as TensorBoard scalars: (tag, value), tags as docs/metrics.md lists them.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m);
std::string format_step_line(const StepMetrics& m, std::int64_t total_steps, double eta_seconds);
std::string format_bytes(std::size_t bytes);  // "28 MiB"
std::string format_count(std::int64_t n);      // "65.5K", "1.23M"
std::string format_duration(double seconds);

// Appends one JSON object per line; flushed every step so a crashed run keeps its history.
class MetricsWriter {
 public:
  // A resumed run keeps the lines of steps up to `keep_through_step` and appends after them
  // (-1: start a new file).
  explicit MetricsWriter(const std::string& path, std::int64_t keep_through_step = -1);
  // One line, flushed; a failed write (a full disk) is an Error naming the file.
  void write(const StepMetrics& m);
  // The validation loss before the first step: {"step": 0, "val_loss": x, "tokens_seen": 0},
  // with no "loss" key (no training step was taken), so readers of the training loss and
  // counters of lines that have one are not misled (docs/metrics.md).
  void write_initial_evaluation(double val_loss);

 private:
  void write_line(const std::string& line);

  std::string path_;
  std::ofstream out_;
};

}  // namespace kintsugi
