#pragma once
// Where a model chunk's parameters, gradients and optimizer state live across the data-parallel
// ranks, and how gradients are reduced (ZeRO, Rajbhandari et al. 2020; FSDP):
//
//   stage 0  everything replicated; gradients all-reduced in buckets during the last
//            micro-batch's backward
//   stage 1  optimizer state (AdamW's or Lion's moments, f32 master weights) sharded: gradients are
//            reduce-scattered, each rank updates its shard, parameters are all-gathered
//   stage 2  gradients sharded too: every micro-batch's gradient of a layer is reduce-scattered
//            as soon as the layer's backward finishes and accumulated into the rank's shard
//   stage 3  parameters sharded too: a layer's parameters are all-gathered before its forward
//            and again before its backward (the next layer's gather starts ahead), and freed
//
// With hybrid sharding (HSDP) the state is sharded over a group of K ranks and replicated over
// the N / K groups, whose gradients are all-reduced once per step.
//
// The pieces, one job each: ShardMap (which elements this rank owns and updates), ParamStorage
// and GradStorage (the stage's arrangement of parameters and of gradients, as strategies),
// GradientBuckets (stage 0's overlapped all-reduce), StagingPool (gathered layers and staged
// gradients). This class composes them with the optimizer and the checkpoint view, and is the
// chunk's UnitObserver: the chunk reports which units it uses and when their gradients are final.
#include <memory>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/tensor_parallel.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/model/unit_observer.hpp"
#include "kintsugi/optim/optimizer.hpp"
#include "kintsugi/parallel/grad_storage.hpp"
#include "kintsugi/parallel/param_storage.hpp"
#include "kintsugi/parallel/shard_map.hpp"
#include "kintsugi/parallel/staging_pool.hpp"

namespace kintsugi {

struct ShardingConfig {
  ZeroStage stage = ZeroStage::none;
  Communicator* shard = nullptr;    // the group sharding the state (null or size 1: none)
  Communicator* replica = nullptr;  // HSDP: the same shard on other groups (null: none)
  std::size_t bucket_bytes = 25 << 20;  // stage 0: units are all-reduced in buckets of this
  // 3D tensor parallelism: the grid's z ranks, over which parameters marked
  // depth_partial_grad have partial gradients (null or size 1: none).
  Communicator* depth = nullptr;
};

class ShardedState final : public UnitObserver {
 public:
  // `params` has registered its units (allocate = false); this binds and owns their storage,
  // initializes weights from `seed` and builds the optimizer. Mixed precision (parameter type
  // bf16/f16) keeps f32 master weights in the optimizer state.
  ShardedState(Backend& backend, ParamStore& params, const ShardingConfig& config,
               const TensorParallel& tp, const OptimizerConfig& optimizer, std::uint64_t seed);

  void acquire(int unit, bool grads) override;
  void release(int unit) override;
  void grads_final(int unit, bool last_micro_batch) override;

  void begin_step();
  // A unit whose gradient must first be summed with another rank's copy (the tied embedding
  // across pipeline stages) is reduced only when reduce_deferred() says so (stages 0-1).
  void defer_unit(int unit) { grads_->defer(unit); }
  void reduce_deferred() { grads_->reduce_deferred(); }
  // Waits for every reduction of the step; the (sharded) gradient is then complete.
  void finish_reduction();
  // Adds to sum (f64 [1] on the device) the squares of the reduced gradient elements this rank
  // holds and counts (replicated parameters on tp rank 0 only, duplicates and tied copies
  // never); norm_group()
  // then sums the ranks.
  void grad_sum_squares(const Tensor& sum) const;
  Communicator* norm_group() const { return stage() >= ZeroStage::optimizer ? shard_ : nullptr; }
  void optimizer_step(double lr, double grad_scale);
  ZeroStage stage() const { return map_.stage(); }

  // Every unit's parameters bound (gathered under stage 3) until release_everything().
  void acquire_everything();
  void release_everything();

  // Checkpoints. The elements whose optimizer state this rank updates (ZeRO: its shard of
  // every unit; otherwise all of them), cut per parameter: `begin` and `count` are elements of
  // the parameter's local (tensor-parallel) tensor, and the views are f32 weights (the master
  // copy under mixed precision) and the optimizer's moments (AdamW: first and second; Lion: its
  // one moment, and v empty).
  struct StatePiece {
    int param = 0;
    std::int64_t begin = 0, count = 0;
    Tensor weights, m, v;
  };
  std::vector<StatePiece> state_pieces() const;
  // Whether this rank's pieces are the ones to save: data-parallel replicas hold the same
  // values (stage 0: every rank; HSDP: every replica group), so only the first one writes.
  bool writes_state() const;
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  // After a resume overwrote the pieces' weights: round the working copies (mixed precision)
  // and gather the parameter buffers that hold other ranks' shards (stages 1-2), as
  // optimizer_step leaves them.
  void refresh_weights();

 private:
  void initialize_master(std::uint64_t seed);
  void build_optimizer(const OptimizerConfig& config);
  void build_norm_ranges();
  // The f32 master weights of an updated range (mixed precision).
  Tensor master(std::int64_t a, std::int64_t n, std::int64_t owned) const;
  void reduce_partial_grads(int unit);

  Backend& backend_;
  ParamStore& params_;
  TensorParallel tp_;
  Communicator* shard_;
  Communicator* replica_;
  Communicator* depth_;
  bool mixed_;
  ShardMap map_;
  StagingPool pool_;  // outlives the storages, which hand their buffers back to it
  std::unique_ptr<ParamStorage> params_storage_;
  std::unique_ptr<GradStorage> grads_;
  Buffer master_;  // mixed precision: f32 master weights of the updated ranges
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<Tensor> norm_ranges_;  // the gradient elements grad_sum_squares counts
};

}  // namespace kintsugi
