#include "kintsugi/parallel/grad_storage.hpp"

#include <deque>
#include <vector>

#include "kintsugi/parallel/gradient_buckets.hpp"

namespace kintsugi {

namespace {

class ReducedGrads final : public GradStorage {
 public:
  ReducedGrads(Backend& backend, ParamStore& params, const ShardMap& map, Communicator* shard,
               Communicator* replica, std::size_t bucket_bytes)
      : backend_(backend), params_(params), map_(map), shard_(shard), replica_(replica),
        buckets_(params, bucket_bytes) {
    const DType gt = params.grad_dtype();
    full_ = backend.allocate(MemoryKind::gradients, params.numel() * size_of(gt));
    for (int u = 0; u < params.units(); ++u)
      params.bind_grads(u, full_.data() + params.unit(u).begin * size_of(gt));
  }
  ~ReducedGrads() override {
    for (auto& h : reductions_) h.wait();  // they read and write our buffer
  }
  Tensor grads(std::int64_t a, std::int64_t n, std::int64_t) const override {
    return full_.elements(params_.grad_dtype(), a, n);
  }
  bool reduces_every_micro_batch() const override { return false; }
  void begin_step() override { buckets_.begin_step(); }
  void reduce(int u) override {
    if (!shard_) return;
    if (stage_zero()) buckets_.launch_final(u, [&](auto begin, auto n) { all_reduce(begin, n); });
    else if (!buckets_.deferred(u)) reduce_scatter(u);
  }
  void defer(int u) override { buckets_.defer(u); }
  void reduce_deferred() override {
    if (!shard_) return;
    for (int u = 0; u < params_.units(); ++u) {
      if (!buckets_.deferred(u)) continue;
      if (stage_zero()) all_reduce(params_.unit(u).begin, params_.unit(u).size());
      else reduce_scatter(u);
    }
  }
  void finish_reduction() override {
    params_.zero_unwritten_grads(backend_);
    if (stage_zero() && shard_)
      buckets_.launch_final(0, [&](auto begin, auto n) { all_reduce(begin, n); });
    for (auto& h : reductions_) h.wait();
    reductions_.clear();
    if (replica_ && !stage_zero())
      for (int u = 0; u < params_.units(); ++u)
        replica_->all_reduce(
            full_.elements(params_.grad_dtype(), map_.chunk(u).begin, map_.chunk(u).size));
  }

 private:
  bool stage_zero() const { return map_.stage() == ZeroStage::none; }
  void all_reduce(std::int64_t begin, std::int64_t n) {
    reductions_.push_back(shard_->all_reduce_async(full_.elements(params_.grad_dtype(), begin, n)));
  }
  // In place: the unit's reduced shard lands where it lies in the full buffer.
  void reduce_scatter(int u) {
    const DType gt = params_.grad_dtype();
    reductions_.push_back(shard_->reduce_scatter_async(
        full_.elements(gt, params_.unit(u).begin, params_.unit(u).size()),
        full_.elements(gt, map_.chunk(u).begin, map_.chunk(u).size)));
  }

  Backend& backend_;
  ParamStore& params_;
  const ShardMap& map_;
  Communicator* shard_;
  Communicator* replica_;
  GradientBuckets buckets_;
  Buffer full_;
  std::vector<CommHandle> reductions_;  // this step's
};

class StagedGrads final : public GradStorage {
 public:
  StagedGrads(Backend& backend, ParamStore& params, const ShardMap& map, Communicator* shard,
              Communicator* replica, StagingPool& pool)
      : backend_(backend), params_(params), map_(map), shard_(shard), replica_(replica),
        pool_(pool), staged_(params.units()), accumulated_(params.units(), 0) {
    owned_ = backend.allocate(MemoryKind::gradients,
                              map.owned_total() * size_of(params.grad_dtype()));
  }
  ~StagedGrads() override {
    for (auto& p : reducing_) p.staging->pending.wait();  // they read our staging buffers
  }
  Tensor grads(std::int64_t, std::int64_t n, std::int64_t owned) const override {
    return owned_.elements(params_.grad_dtype(), owned, n);
  }
  bool reduces_every_micro_batch() const override { return true; }
  void begin_step() override { std::fill(accumulated_.begin(), accumulated_.end(), 0); }
  void acquire(int u) override {
    if (staged_[u]) return;
    staged_[u] = pool_.take(params_.unit(u).size() * size_of(params_.grad_dtype()));
    params_.bind_grads(u, staged_[u]->buffer.data());
    params_.reset_written(u);  // the staging buffer is new this micro-batch
  }
  void reduce(int u) override {
    const DType gt = params_.grad_dtype();
    auto s = std::move(staged_[u]);
    KINTSUGI_ASSERT(s != nullptr);
    params_.bind_grads(u, nullptr);
    const Tensor whole = s->buffer.view(gt, Shape{params_.unit(u).size()});
    if (shard_) s->pending = shard_->reduce_scatter_async(whole, mine(*s, u));
    reducing_.push_back({u, std::move(s)});
    reclaim(false);
  }
  void defer(int) override {}  // stages 2-3 are not combined with pipeline parallelism
  void reduce_deferred() override {}
  void finish_reduction() override {
    reclaim(true);
    const DType gt = params_.grad_dtype();
    for (int u = 0; u < params_.units(); ++u)
      if (!accumulated_[u]) backend_.zero(own(u));
    if (replica_) replica_->all_reduce(owned_.elements(gt, 0, map_.owned_total()));
  }

 private:
  Tensor own(int u) const {
    return owned_.elements(params_.grad_dtype(), map_.chunk(u).offset, map_.chunk(u).size);
  }
  // This rank's part of a unit's staged gradient (where the reduce-scatter leaves it).
  Tensor mine(const Staging& s, int u) const {
    const std::int64_t n = map_.chunk(u).size;
    return s.buffer.elements(params_.grad_dtype(), map_.rank() * n, n);
  }
  // Accumulates finished reductions into the shard; two stay in flight so the communication
  // thread is busy while the next layer runs (all: every one).
  void reclaim(bool all) {
    while (!reducing_.empty() && (all || reducing_.size() > 2)) {
      Pending p = std::move(reducing_.front());
      reducing_.pop_front();
      p.staging->pending.wait();
      const Tensor acc = own(p.unit);
      if (accumulated_[p.unit]) backend_.add(acc, mine(*p.staging, p.unit), acc);
      else backend_.copy(mine(*p.staging, p.unit), acc);
      accumulated_[p.unit] = 1;
      pool_.give_back(std::move(p.staging));
    }
  }

  Backend& backend_;
  ParamStore& params_;
  const ShardMap& map_;
  Communicator* shard_;
  Communicator* replica_;
  StagingPool& pool_;
  Buffer owned_;
  std::vector<std::unique_ptr<Staging>> staged_;  // per unit, while written
  std::vector<char> accumulated_;                 // the unit's shard written this step
  struct Pending {
    int unit;
    std::unique_ptr<Staging> staging;
  };
  std::deque<Pending> reducing_;
};

}  // namespace

std::unique_ptr<GradStorage> make_grad_storage(Backend& backend, ParamStore& params,
                                               const ShardMap& map, Communicator* shard,
                                               Communicator* replica, std::size_t bucket_bytes,
                                               StagingPool& pool) {
  if (map.stage() >= ZeroStage::gradients)
    return std::make_unique<StagedGrads>(backend, params, map, shard, replica, pool);
  return std::make_unique<ReducedGrads>(backend, params, map, shard, replica, bucket_bytes);
}

}  // namespace kintsugi
