#pragma once
// Where a model chunk's gradients live and how they are reduced across the data-parallel ranks
// (ZeRO), one strategy per arrangement:
//   reduced  stages 0-1: one full gradient buffer that every micro-batch accumulates into; after
//            the last micro-batch's backward, stage 0 all-reduces it bucket by bucket as the
//            layers finish (gradient_buckets.hpp), stage 1 reduce-scatters each layer in place
//            (each rank keeps the shard it updates), and hybrid sharding then all-reduces the
//            shard across the replicas
//   staged   stages 2-3: a layer's gradient of one micro-batch is written into a staging
//            buffer, reduce-scattered as soon as the layer's backward finishes and accumulated
//            into this rank's shard; the full gradient exists one layer at a time
#include <cstdint>
#include <memory>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/shard_map.hpp"
#include "kintsugi/parallel/staging_pool.hpp"

namespace kintsugi {

class GradStorage {
 public:
  virtual ~GradStorage() = default;
  // The reduced gradient of elements [a, a + n) that this rank updates (`owned`: where they
  // start in its shard), complete after finish_reduction().
  virtual Tensor grads(std::int64_t a, std::int64_t n, std::int64_t owned) const = 0;
  // Whether each micro-batch's gradient of a unit is reduced (stages 2-3) or only the step's
  // accumulated one, after the last micro-batch (stages 0-1).
  virtual bool reduces_every_micro_batch() const = 0;
  virtual void begin_step() = 0;
  // The unit's gradient is about to be written (stages 2-3 bind a staging buffer).
  virtual void acquire(int unit) {}
  // The unit's gradient is final: start its reduction.
  virtual void reduce(int unit) = 0;
  // A unit whose gradient is first summed with another copy (the tied embedding across
  // pipeline stages) is reduced only by reduce_deferred() (stages 0-1).
  virtual void defer(int unit) = 0;
  virtual void reduce_deferred() = 0;
  // Waits for every reduction of the step.
  virtual void finish_reduction() = 0;
};

// `shard`: the group the state is sharded over (stage 0: the data-parallel group; null: one
// rank); `replica`: hybrid sharding's group of copies of this shard (null: none).
std::unique_ptr<GradStorage> make_grad_storage(Backend& backend, ParamStore& params,
                                               const ShardMap& map, Communicator* shard,
                                               Communicator* replica, std::size_t bucket_bytes,
                                               StagingPool& pool);

}  // namespace kintsugi
