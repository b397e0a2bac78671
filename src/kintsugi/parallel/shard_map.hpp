#pragma once
// Which elements of a chunk's flat buffers this rank owns and updates under ZeRO: rank r of N
// owns elements [r, r + 1) x size / N of every unit (one layer), stored one after another in
// its owned buffers. Without ZeRO a rank updates everything; with it, only what it owns. The
// optimizer, the gradient norm and checkpoints all walk the same ranges in the same order.
#include <cstdint>
#include <functional>
#include <vector>

#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/layout_rules.hpp"

namespace kintsugi {

class ShardMap {
 public:
  ShardMap(const ParamStore& params, ZeroStage stage, int shards, int rank);

  struct Chunk {  // this rank's shard of a unit
    std::int64_t begin = 0, size = 0;  // elements of the unit's logical range
    std::int64_t offset = 0;           // into the owned buffers
  };
  const Chunk& chunk(int unit) const { return chunks_[unit]; }
  std::int64_t owned_total() const { return owned_total_; }
  int shards() const { return shards_; }
  int rank() const { return rank_; }
  ZeroStage stage() const { return stage_; }

  // Calls fn for every run of elements this rank updates (one parameter's part of its unit's
  // range, or of its shard): the parameter, the run's first element in the unit buffers, its
  // length, and where it starts in the owned (sharded) buffers.
  using RangeFn = std::function<void(int param, std::int64_t a, std::int64_t n, std::int64_t owned)>;
  void for_each_updated_range(const RangeFn& fn) const;

 private:
  const ParamStore& params_;
  ZeroStage stage_;
  int shards_, rank_;
  std::vector<Chunk> chunks_;
  std::int64_t owned_total_ = 0;
};

}  // namespace kintsugi
