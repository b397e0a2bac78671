#include "kintsugi/parallel/shard_map.hpp"

#include <algorithm>

namespace kintsugi {

ShardMap::ShardMap(const ParamStore& params, ZeroStage stage, int shards, int rank)
    : params_(params), stage_(stage), shards_(shards), rank_(rank) {
  for (int u = 0; u < params.units(); ++u) {
    const ParamUnit& unit = params.unit(u);
    KINTSUGI_ASSERT(unit.size() % shards_ == 0);
    const std::int64_t c = unit.size() / shards_;
    chunks_.push_back({unit.begin + rank_ * c, c, owned_total_});
    owned_total_ += c;
  }
}

void ShardMap::for_each_updated_range(const RangeFn& fn) const {
  for (int u = 0; u < params_.units(); ++u) {
    const ParamUnit& unit = params_.unit(u);
    const Chunk& c = chunks_[u];
    // The elements this rank updates, and where they sit in each buffer.
    const bool all = stage_ == ZeroStage::none;
    const std::int64_t lo = all ? unit.begin : c.begin;
    const std::int64_t hi = all ? unit.end : c.begin + c.size;
    for (int i = unit.first_param; i < unit.end_param; ++i) {
      const ParamEntry& e = params_.entry(i);
      const std::int64_t end = i + 1 < unit.end_param ? params_.entry(i + 1).offset : unit.end;
      const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, end);
      if (a < b) fn(i, a, b - a, c.offset + (a - c.begin));
    }
  }
}

}  // namespace kintsugi
