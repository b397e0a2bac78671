#pragma once
// Where a model chunk's parameters, gradients and optimizer state live across the data-parallel
// ranks, and how gradients are reduced (ZeRO, Rajbhandari et al. 2020; FSDP):
//
//   stage 0  everything replicated; gradients all-reduced in buckets during the last
//            micro-batch's backward
//   stage 1  optimizer state (AdamW moments, f32 master weights) sharded: gradients are
//            reduce-scattered, each rank updates its shard, parameters are all-gathered
//   stage 2  gradients sharded too: every micro-batch's gradient of a layer is reduce-scattered
//            as soon as the layer's backward finishes and accumulated into the rank's shard;
//            the full gradient exists only one layer at a time
//   stage 3  parameters sharded too: a layer's parameters are all-gathered before its forward
//            and again before its backward (the next layer's gather starts ahead), and freed
//
// Sharding is per unit (one layer): rank r of N owns elements [r, r + 1) x size / N of every
// unit. With hybrid sharding (HSDP) the state is sharded over a group of K ranks and replicated
// over the N / K groups, whose gradients are all-reduced once per step.
//
// It implements UnitObserver: the chunk reports which units it uses and when their gradients
// are final; staging buffers for gathered parameters and staged gradients are pooled and
// count as communication buffers.
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/model/unit_observer.hpp"
#include "kintsugi/optim/adamw.hpp"
#include "kintsugi/comm/tensor_parallel.hpp"

namespace kintsugi {

struct ShardingConfig {
  int stage = 0;
  Communicator* shard = nullptr;    // the group sharding the state (null or size 1: none)
  Communicator* replica = nullptr;  // HSDP: the same shard on other groups (null: none)
  std::size_t bucket_bytes = 25 << 20;  // stage 0: units are all-reduced in buckets of this
};

class ShardedState final : public UnitObserver {
 public:
  // `params` has registered its units (allocate = false); this binds and owns their storage,
  // initializes weights from `seed` and builds the optimizer. Mixed precision (parameter type
  // bf16/f16) keeps f32 master weights in the optimizer state.
  ShardedState(Backend& backend, ParamStore& params, const ShardingConfig& config,
               const TensorParallel& tp, const AdamWConfig& adamw, std::uint64_t seed);
  ~ShardedState() override;

  void acquire(int unit, bool grads) override;
  void release(int unit) override;
  void grads_final(int unit, bool last_micro_batch) override;

  void begin_step();
  // A unit whose gradient must first be summed with another rank's copy (the tied embedding
  // across pipeline stages) is reduced only when reduce_deferred() says so (stages 0-1).
  void defer_unit(int unit);
  void reduce_deferred();
  // Waits for every reduction of the step; the (sharded) gradient is then complete.
  void finish_reduction();
  // Adds to sum (f64 [1] on the device) the squares of the reduced gradient elements this rank
  // holds and counts (replicated parameters on tp rank 0 only, tied copies never); norm_group()
  // then sums the ranks.
  void grad_sum_squares(const Tensor& sum) const;
  Communicator* norm_group() const { return stage_ >= 1 ? shard_ : nullptr; }
  void optimizer_step(double lr, double grad_scale);
  int stage() const { return stage_; }

  // Every unit's parameters bound (gathered under stage 3) until release_everything().
  void acquire_everything();
  void release_everything();

  // Checkpoints. The elements whose optimizer state this rank updates (ZeRO: its shard of
  // every unit; otherwise all of them), cut per parameter: `begin` and `count` are elements of
  // the parameter's local (tensor-parallel) tensor, and the views are f32 weights (the master
  // copy under mixed precision), first and second moments.
  struct StatePiece {
    int param = 0;
    std::int64_t begin = 0, count = 0;
    Tensor weights, m, v;
  };
  std::vector<StatePiece> state_pieces() const;
  // Whether this rank's pieces are the ones to save: data-parallel replicas hold the same
  // values (stage 0: every rank; HSDP: every replica group), so only the first one writes.
  bool writes_state() const;
  AdamW& optimizer() { return *adamw_; }
  const AdamW& optimizer() const { return *adamw_; }
  // After a resume overwrote the pieces' weights: round the working copies (mixed precision)
  // and gather the parameter buffers that hold other ranks' shards (stages 1-2), as
  // optimizer_step leaves them.
  void refresh_weights();

 private:
  struct Chunk {  // this rank's shard of a unit
    std::int64_t begin = 0, size = 0;  // elements of the unit's logical range
    std::int64_t offset = 0;           // into the owned buffers
  };
  struct Staging {
    Buffer buffer;
    CommHandle pending;  // gather into it (params) or reduce-scatter out of it (grads)
  };
  std::unique_ptr<Staging> take_staging(std::size_t bytes);
  void give_back(std::unique_ptr<Staging> s);
  Tensor unit_tensor(const Buffer& buffer, DType dtype, int unit) const;
  Tensor owned(const Buffer& b, DType dtype, int unit) const;  // unit's chunk in owned buffers
  void start_gather(int unit);
  void launch_buckets(int down_to_unit);
  void reduce_scatter_unit(int unit);
  void build_buckets();
  void drop_prefetched();
  void reclaim_grads(bool all);
  void reduce_sequence_parallel(int unit);
  // Calls fn for every run of elements this rank updates (one parameter's part of its unit's
  // range, or of its shard): the parameter, the run's first element in the unit buffers, its
  // length, and where it starts in the owned (sharded) buffers.
  void for_each_updated_range(
      const std::function<void(int param, std::int64_t a, std::int64_t n, std::int64_t owned)>& fn)
      const;
  void build_optimizer(const AdamWConfig& adamw);
  void gather_updated_params();
  void initialize(std::uint64_t seed);

  Backend& backend_;
  ParamStore& params_;
  TensorParallel tp_;
  int stage_;
  Communicator* shard_;
  Communicator* replica_;
  int shards_ = 1, shard_rank_ = 0;
  bool mixed_;
  std::vector<Chunk> chunks_;
  std::int64_t owned_total_ = 0;

  Buffer full_params_, full_grads_;            // stages 0-2 / 0-1
  Buffer owned_params_, owned_grads_, master_;  // stage 3 / 2-3 / mixed precision
  std::vector<char> accumulated_;               // stages 2-3: unit's shard written this step

  // Stage 0 buckets: groups of units from the end, launched when their lowest unit is final.
  struct Bucket {
    int first_unit, last_unit;
    bool deferred = false;
  };
  std::vector<Bucket> buckets_;
  std::size_t next_bucket_ = 0;
  std::vector<CommHandle> reductions_;  // stages 0-1, this step
  std::vector<char> deferred_;
  std::size_t bucket_bytes_;

  std::vector<int> use_count_;
  std::vector<std::unique_ptr<Staging>> gathered_;  // stage 3: per unit, while gathered
  std::vector<std::unique_ptr<Staging>> grad_stage_;  // stages 2-3: per unit, while written
  struct PendingReduce {
    int unit;
    std::unique_ptr<Staging> staging;
  };
  std::deque<PendingReduce> reducing_;
  std::multimap<std::size_t, std::unique_ptr<Staging>> pool_;
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace kintsugi
