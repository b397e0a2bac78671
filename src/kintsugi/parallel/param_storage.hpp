#pragma once
// Where a model chunk's parameters live across the data-parallel ranks (ZeRO, FSDP), one
// strategy per arrangement:
//   full      stages 0-2: every rank keeps the whole parameter buffer; under stages 1-2 each
//             rank updates its shard and the shards are all-gathered after the step
//   gathered  stage 3: a rank keeps only its shard; a unit's parameters are all-gathered into
//             a staging buffer before it is used (the next unit's gather starts ahead, in the
//             direction of travel) and freed after
#include <cstdint>
#include <memory>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/shard_map.hpp"
#include "kintsugi/parallel/staging_pool.hpp"

namespace kintsugi {

class ParamStorage {
 public:
  virtual ~ParamStorage() = default;
  // The weights of elements [a, a + n) of the logical buffer, which this rank updates; `owned`
  // is where they start in its shard (ShardMap::for_each_updated_range).
  virtual Tensor weights(std::int64_t a, std::int64_t n, std::int64_t owned) const = 0;
  // Writes the initial values of every parameter this rank keeps.
  virtual void initialize(std::uint64_t seed) = 0;
  // The unit's parameters usable from acquire to the matching release (backward: the next unit
  // used is the one below).
  virtual void acquire(int unit, bool backward) {}
  virtual void release(int unit) {}
  // Gathers started ahead but never used (past the last layer) are dropped.
  virtual void drop_prefetched() {}
  // After this rank updated its shard: bring the whole parameter buffer up to date.
  virtual void gather_updated() {}
};

// `shard` is the group the state is sharded over (null: none).
std::unique_ptr<ParamStorage> make_param_storage(Backend& backend, ParamStore& params,
                                                 const ShardMap& map, Communicator* shard,
                                                 StagingPool& pool);

}  // namespace kintsugi
