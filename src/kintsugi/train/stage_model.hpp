#pragma once
// The part of the model this rank trains: its pipeline chunks (all of the model without
// pipeline parallelism), each with its parameter storage, gradients and AdamW state (a
// ShardedState: replicated or ZeRO-sharded across data-parallel ranks), and the executor that
// runs a pipeline schedule over them. One optimizer step is one schedule: forward and backward
// of every micro-batch, gradient reduction (data-parallel, tied embedding copies,
// sequence-parallel partial sums), global norm, AdamW.
#include <functional>
#include <memory>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/trace.hpp"
#include "kintsugi/model/model_chunk.hpp"
#include "kintsugi/optim/loss_scaler.hpp"
#include "kintsugi/parallel/pipeline_executor.hpp"
#include "kintsugi/parallel/sharded_state.hpp"
#include "kintsugi/parallel/stage_partition.hpp"
#include "kintsugi/train/place.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

class StageModel {
 public:
  // Builds and initializes this rank's chunks for `config` (resolved layout).
  StageModel(Backend& backend, const RunConfig& config, const Place& place, Tracer& tracer);

  // Fills micro-batch mb of this data-parallel rank's share of a batch.
  using Sampler = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;

  struct StepResult {
    double loss_sum = 0;  // token losses summed over the whole global batch (all ranks)
    double grad_norm = 0;    // of the unscaled gradient
    bool skipped = false;    // fp16: the gradient overflowed, the step was not taken
    double loss_scale = 1;   // the scale this step's loss was multiplied by
    // Mixture of experts: per layer of the model, its MoeStats summed over the job:
    // [aux_sum, z_sum, micro_batches, dropped, rows of expert 0, ..., rows of expert E-1]
    // (empty for a dense model).
    std::vector<double> moe;
    // Expert parallelism, this rank's alone: routed rows sent to and received from the other
    // ep ranks, and the MoE layer forwards (micro-batches x layers) that exchanged them.
    std::int64_t moe_rows_sent = 0, moe_rows_received = 0, moe_forwards = 0;
  };
  // One optimizer step over `micro_batches` micro-batches of this rank; the gradient is that
  // of grad_scale x (sum of token losses). In fp16 the loss is also multiplied by the dynamic
  // loss scale, which the optimizer divides out; an overflowed step is skipped.
  StepResult train_step(const Sampler& sample, int micro_batches, double grad_scale, double lr,
                        double grad_clip);
  // Sum of token losses over `micro_batches` micro-batches of this rank, summed over the job.
  // Every rank of the job calls it, whatever its share (none included), and every rank runs
  // the same sequence of collectives: first the `shared_micro_batches` that every data-parallel
  // rank has (the fewest any rank has), the only ones offered to the stop check, then the rest
  // of its own without any collective outside its pipeline. Under ZeRO-3 every data-parallel
  // rank must also run the same number of forwards (each gathers every layer's weights from
  // the group), so a rank with fewer runs more, up to `lockstep_micro_batches` (the most any
  // rank has), on samples k >= micro_batches, and discards their losses.
  double evaluate(const Sampler& sample, int micro_batches, int shared_micro_batches,
                  int lockstep_micro_batches);
  // Which micro-batches of train_step and of evaluate's own micro-batches look for a stop
  // signal (every rank must answer alike): before such a micro-batch's forward, the ranks that
  // run it in lockstep agree whether any of them received SIGTERM/SIGINT
  // (PipelineExecutor::Hooks::stop). A stop ends the step or evaluation early, with the weights
  // and optimizer state as they were, and interrupted() true until the next call.
  void set_stop_check(std::function<bool(int mb)> checked) { stop_check_ = std::move(checked); }
  bool interrupted() const { return interrupted_; }

  const std::vector<std::unique_ptr<ModelChunk>>& chunks() const { return chunks_; }
  // Every parameter store of this rank: the chunks', then (expert parallelism) the chunks'
  // expert stores; state_count() states in the same order (any_state).
  std::vector<const ParamStore*> params() const;
  std::vector<const ParamStore*> chunk_params() const;
  std::vector<const ParamStore*> expert_params() const;  // empty without expert parallelism
  int state_count() const { return static_cast<int>(states_.size() + expert_states_.size()); }
  ShardedState& any_state(int i);
  // Every chunk's parameters usable (gathered under ZeRO-3), e.g. to save them.
  void acquire_all_params();
  void release_all_params();
  // Auxiliary-loss-free balancing (model.moe_router_bias_update_rate > 0, docs/moe.md
  // "DeepSeek-style routing"): every MoE layer's per-expert selection bias, [layers, experts]
  // (the whole model's on every rank, the same everywhere); empty without it. Updated at the
  // end of each train_step that took its optimizer step; set when a checkpoint is resumed.
  const std::vector<float>& moe_router_bias() const { return moe_router_bias_; }
  void set_moe_router_bias(const std::vector<float>& bias);
  double moe_router_bias_max_abs() const;
  const StagePartition& partition() const { return partition_; }
  PipelineSchedule schedule() const { return schedule_; }
  int virtual_stages() const { return virtual_stages_; }
  int slots() const { return chunks_.front()->slots(); }  // activation slots, shared by chunks
  const ShardedState& state(int chunk) const { return *states_[chunk]; }
  ShardedState& state(int chunk) { return *states_[chunk]; }
  const LossScaler& loss_scaler() const { return scaler_; }
  LossScaler& loss_scaler() { return scaler_; }
  // From the last train_step: seconds computing, and micro-batches held at once.
  double compute_seconds() const { return executor_->compute_seconds(); }
  int peak_in_flight() const { return executor_->peak_in_flight(); }

 private:
  void reduce_grads();
  void optimizer_step();
  // The loss chunk's running sum of token losses (this rank; 0 without the loss chunk).
  void zero_loss();
  double local_loss() const;
  double sum_over_job(double local) const;  // over pipeline stages and data-parallel ranks
  std::vector<double> moe_stats() const;    // StepResult::moe, summed over the job
  void update_moe_router_bias(const std::vector<double>& stats);  // from StepResult::moe
  // The executor's stop hooks (see set_stop_check); empty without a check.
  PipelineExecutor::Hooks stop_hooks(const std::function<bool(int)>& checked) const;

  Backend& backend_;
  const Place& place_;
  PipelineSchedule schedule_;
  int virtual_stages_;
  StagePartition partition_;
  std::unique_ptr<ActivationPool> activation_pool_;  // the chunks' slots (before them: outlives)
  std::vector<std::unique_ptr<ModelChunk>> chunks_;
  std::vector<std::unique_ptr<ShardedState>> states_;
  std::vector<std::unique_ptr<ShardedState>> expert_states_;  // expert parallelism's stores
  std::unique_ptr<PipelineExecutor> executor_;
  LossScaler scaler_;
  Buffer grad_sum_squares_;  // f64 [1] on the device: this rank's part of the squared norm
  double lr_ = 0, grad_clip_ = 0, grad_norm_ = 0;
  bool skipped_ = false;
  std::function<bool(int mb)> stop_check_;
  bool interrupted_ = false;
  std::vector<float> moe_router_bias_;
};

}  // namespace kintsugi
