#include "kintsugi/parallel/param_storage.hpp"

#include <vector>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

namespace {

// Initial values of elements [begin, begin + count) of the logical buffer, into dst.
void write_initial(const ParamStore& params, std::uint64_t seed, std::int64_t begin,
                   std::int64_t count, const Tensor& dst) {
  std::vector<float> values(static_cast<std::size_t>(count));
  params.initial_values(seed, begin, begin + count, values.data());
  write_values(values.data(), dst);
}

class FullParams final : public ParamStorage {
 public:
  FullParams(Backend& backend, ParamStore& params, const ShardMap& map, Communicator* shard)
      : params_(params), map_(map), shard_(shard) {
    const DType pt = params.param_dtype();
    full_ = backend.allocate(MemoryKind::parameters, params.numel() * size_of(pt));
    for (int u = 0; u < params.units(); ++u)
      params.bind_params(u, full_.data() + params.unit(u).begin * size_of(pt));
  }
  Tensor weights(std::int64_t a, std::int64_t n, std::int64_t) const override {
    return full_.elements(params_.param_dtype(), a, n);
  }
  void initialize(std::uint64_t seed) override {
    write_initial(params_, seed, 0, params_.numel(),
                  full_.elements(params_.param_dtype(), 0, params_.numel()));
  }
  void gather_updated() override {
    if (map_.stage() == ZeroStage::none || !shard_) return;
    // Stages 1-2: every rank updated its shard of the weights; gather them all, in place.
    const DType pt = params_.param_dtype();
    std::vector<CommHandle> gathers;
    for (int u = 0; u < params_.units(); ++u)
      gathers.push_back(shard_->all_gather_async(
          full_.elements(pt, map_.chunk(u).begin, map_.chunk(u).size),
          full_.elements(pt, params_.unit(u).begin, params_.unit(u).size())));
    for (auto& g : gathers) g.wait();
  }

 private:
  ParamStore& params_;
  const ShardMap& map_;
  Communicator* shard_;
  Buffer full_;
};

class GatheredParams final : public ParamStorage {
 public:
  GatheredParams(Backend& backend, ParamStore& params, const ShardMap& map, Communicator* shard,
                 StagingPool& pool)
      : backend_(backend), params_(params), map_(map), shard_(shard), pool_(pool),
        use_count_(params.units(), 0), gathered_(params.units()) {
    owned_ = backend.allocate(MemoryKind::parameters,
                              map.owned_total() * size_of(params.param_dtype()));
  }
  ~GatheredParams() override {
    for (auto& g : gathered_)
      if (g) g->pending.wait();  // a gather in flight writes into its staging buffer
  }
  Tensor weights(std::int64_t, std::int64_t n, std::int64_t owned) const override {
    return owned_.elements(params_.param_dtype(), owned, n);
  }
  void initialize(std::uint64_t seed) override {
    for (int u = 0; u < params_.units(); ++u) {
      const ShardMap::Chunk& c = map_.chunk(u);
      write_initial(params_, seed, c.begin, c.size, own(u));
    }
  }
  void acquire(int u, bool backward) override {
    ++use_count_[u];
    if (!gathered_[u]) start_gather(u);
    gathered_[u]->pending.wait();
    params_.bind_params(u, gathered_[u]->buffer.data());
    // Prefetch: the next layer in the direction of travel (forward up, backward down).
    const int next = backward ? u - 1 : u + 1;
    if (next >= 0 && next < params_.units() && !gathered_[next]) start_gather(next);
  }
  void release(int u) override {
    KINTSUGI_ASSERT(use_count_[u] > 0);
    if (--use_count_[u] > 0) return;
    params_.bind_params(u, nullptr);
    pool_.give_back(std::move(gathered_[u]));
  }
  void drop_prefetched() override {
    for (int u = 0; u < params_.units(); ++u)
      if (gathered_[u] && use_count_[u] == 0) {
        gathered_[u]->pending.wait();
        pool_.give_back(std::move(gathered_[u]));
      }
  }

 private:
  Tensor own(int u) const {
    return owned_.elements(params_.param_dtype(), map_.chunk(u).offset, map_.chunk(u).size);
  }
  void start_gather(int u) {
    const DType pt = params_.param_dtype();
    auto s = pool_.take(params_.unit(u).size() * size_of(pt));
    const Tensor whole = s->buffer.view(pt, Shape{params_.unit(u).size()});
    if (shard_) s->pending = shard_->all_gather_async(own(u), whole);
    else backend_.copy(own(u), whole);
    gathered_[u] = std::move(s);
  }

  Backend& backend_;
  ParamStore& params_;
  const ShardMap& map_;
  Communicator* shard_;
  StagingPool& pool_;
  Buffer owned_;
  std::vector<int> use_count_;
  std::vector<std::unique_ptr<Staging>> gathered_;  // per unit, while gathered
};

}  // namespace

std::unique_ptr<ParamStorage> make_param_storage(Backend& backend, ParamStore& params,
                                                 const ShardMap& map, Communicator* shard,
                                                 StagingPool& pool) {
  if (map.stage() == ZeroStage::parameters)
    return std::make_unique<GatheredParams>(backend, params, map, shard, pool);
  return std::make_unique<FullParams>(backend, params, map, shard);
}

}  // namespace kintsugi
