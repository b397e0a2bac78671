#include "kintsugi/parallel/sharded_state.hpp"

#include <algorithm>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

namespace {

bool low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

// Elements [begin, begin + count) of a buffer seen as `dtype`.
Tensor slice(const Buffer& buffer, DType dtype, std::int64_t begin, std::int64_t count) {
  return buffer.view(dtype, Shape{count}, static_cast<std::size_t>(begin) * size_of(dtype));
}

// Writes float values into a tensor of any float type (f64 exactly).
void store(const std::vector<float>& values, const Tensor& dst) {
  KINTSUGI_ASSERT(static_cast<std::int64_t>(values.size()) == dst.numel());
  write_values(values.data(), dst);
}

}  // namespace

ShardedState::ShardedState(Backend& backend, ParamStore& params, const ShardingConfig& config,
                           const TensorParallel& tp, const AdamWConfig& adamw, std::uint64_t seed)
    : backend_(backend),
      params_(params),
      tp_(tp),
      stage_(config.stage),
      shard_(config.shard && config.shard->size() > 1 ? config.shard : nullptr),
      replica_(config.replica && config.replica->size() > 1 ? config.replica : nullptr),
      mixed_(low_precision(params.param_dtype())) {
  shards_ = shard_ ? shard_->size() : 1;
  shard_rank_ = shard_ ? shard_->rank() : 0;
  const DType pt = params.param_dtype(), gt = params.grad_dtype();
  const std::int64_t total = params.numel();
  for (int u = 0; u < params.units(); ++u) {
    const ParamUnit& unit = params.unit(u);
    KINTSUGI_ASSERT(unit.size() % shards_ == 0);
    const std::int64_t c = unit.size() / shards_;
    chunks_.push_back({unit.begin + shard_rank_ * c, c, owned_total_});
    owned_total_ += c;
  }
  const std::int64_t shard_len = stage_ >= 1 ? owned_total_ : total;
  if (stage_ <= 2) {
    full_params_ = backend.allocate(MemoryKind::parameters, total * size_of(pt));
    for (int u = 0; u < params.units(); ++u)
      params.bind_params(u, full_params_.data() + params.unit(u).begin * size_of(pt));
  } else {
    owned_params_ = backend.allocate(MemoryKind::parameters, owned_total_ * size_of(pt));
  }
  if (stage_ <= 1) {
    full_grads_ = backend.allocate(MemoryKind::gradients, total * size_of(gt));
    for (int u = 0; u < params.units(); ++u)
      params.bind_grads(u, full_grads_.data() + params.unit(u).begin * size_of(gt));
  } else {
    owned_grads_ = backend.allocate(MemoryKind::gradients, owned_total_ * size_of(gt));
  }
  if (mixed_) master_ = backend.allocate(MemoryKind::optimizer_state, shard_len * sizeof(float));
  bucket_bytes_ = config.bucket_bytes;
  deferred_.assign(params.units(), 0);
  use_count_.assign(params.units(), 0);
  accumulated_.assign(params.units(), 0);
  gathered_.resize(params.units());
  grad_stage_.resize(params.units());
  build_buckets();
  initialize(seed);
  build_optimizer(adamw);
}

ShardedState::~ShardedState() {
  // Outstanding transfers read or write our buffers: let them finish first.
  for (auto& h : reductions_) h.wait();
  for (auto& p : reducing_) p.staging->pending.wait();
  for (auto& g : gathered_)
    if (g) g->pending.wait();
}

void ShardedState::build_buckets() {
  // Stage 0: buckets of whole units from the end, each at least bucket_bytes; a deferred unit
  // is a bucket of its own.
  buckets_.clear();
  const std::size_t es = size_of(params_.grad_dtype());
  for (int last = params_.units() - 1; last >= 0;) {
    int first = last;
    std::int64_t elements = params_.unit(first).size();
    while (!deferred_[first] && first > 0 && !deferred_[first - 1] &&
           static_cast<std::size_t>(elements) * es < bucket_bytes_)
      elements += params_.unit(--first).size();
    buckets_.push_back({first, last, deferred_[first] != 0});
    last = first - 1;
  }
}

void ShardedState::defer_unit(int u) {
  deferred_[u] = 1;
  build_buckets();
}

void ShardedState::reduce_deferred() {
  if (stage_ > 1 || !shard_) return;
  for (int u = 0; u < params_.units(); ++u) {
    if (!deferred_[u]) continue;
    if (stage_ == 0) {
      reductions_.push_back(shard_->all_reduce_async(
          slice(full_grads_, params_.grad_dtype(), params_.unit(u).begin, params_.unit(u).size())));
    } else {
      reduce_scatter_unit(u);
    }
  }
}

void ShardedState::initialize(std::uint64_t seed) {
  const DType pt = params_.param_dtype();
  std::vector<float> values;
  auto fill = [&](std::int64_t begin, std::int64_t count) {
    values.resize(static_cast<std::size_t>(count));
    params_.initial_values(seed, begin, begin + count, values.data());
  };
  if (stage_ <= 2) {
    fill(0, params_.numel());
    store(values, slice(full_params_, pt, 0, params_.numel()));
    if (mixed_ && stage_ == 0) store(values, slice(master_, DType::f32, 0, params_.numel()));
  }
  if (stage_ >= 1)
    for (const Chunk& c : chunks_) {
      fill(c.begin, c.size);
      if (stage_ == 3) store(values, slice(owned_params_, pt, c.offset, c.size));
      if (mixed_) store(values, slice(master_, DType::f32, c.offset, c.size));
    }
}

void ShardedState::for_each_updated_range(
    const std::function<void(int param, std::int64_t a, std::int64_t n, std::int64_t owned)>& fn)
    const {
  for (int u = 0; u < params_.units(); ++u) {
    const ParamUnit& unit = params_.unit(u);
    const Chunk& c = chunks_[u];
    // The elements this rank updates, and where they sit in each buffer.
    const std::int64_t lo = stage_ == 0 ? unit.begin : c.begin;
    const std::int64_t hi = stage_ == 0 ? unit.end : c.begin + c.size;
    for (int i = unit.first_param; i < unit.end_param; ++i) {
      const ParamEntry& e = params_.entry(i);
      const std::int64_t end = i + 1 < unit.end_param ? params_.entry(i + 1).offset : unit.end;
      const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, end);
      if (a < b) fn(i, a, b - a, c.offset + (a - c.begin));
    }
  }
}

void ShardedState::build_optimizer(const AdamWConfig& config) {
  const DType pt = params_.param_dtype(), gt = params_.grad_dtype();
  std::vector<AdamWSegment> segments;
  for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    const ParamEntry& e = params_.entry(i);
    AdamWSegment s;
    s.decay = e.spec.weight_decay;
    const Tensor weights = stage_ <= 2 ? slice(full_params_, pt, a, n)
                                       : slice(owned_params_, pt, owned, n);
    s.grad = stage_ <= 1 ? slice(full_grads_, gt, a, n)
                         : slice(owned_grads_, gt, owned, n);
    if (mixed_) {
      s.param = slice(master_, DType::f32, stage_ == 0 ? a : owned, n);
      s.working_copy = weights;
    } else {
      s.param = weights;
    }
    // Neighbours with the same decay setting make one segment when each of their buffers
    // continues the previous one (under ZeRO-2 the owned master weights and gradients of
    // two units are adjacent but their working copies, in the full buffer, are not).
    auto follows = [](const Tensor& prev, const Tensor& next) {
      return static_cast<std::byte*>(prev.data) + prev.bytes() == next.data;
    };
    if (!segments.empty() && segments.back().decay == s.decay &&
        follows(segments.back().param, s.param) && follows(segments.back().grad, s.grad) &&
        (!mixed_ || follows(segments.back().working_copy, s.working_copy))) {
      AdamWSegment& prev = segments.back();
      prev.param.shape = Shape{prev.param.numel() + n};
      prev.grad.shape = Shape{prev.grad.numel() + n};
      if (mixed_) prev.working_copy.shape = Shape{prev.working_copy.numel() + n};
    } else {
      segments.push_back(s);
    }
  });
  adamw_ = std::make_unique<AdamW>(backend_, std::move(segments), config);
}

std::unique_ptr<ShardedState::Staging> ShardedState::take_staging(std::size_t bytes) {
  auto it = pool_.lower_bound(bytes);
  if (it != pool_.end()) {
    auto s = std::move(it->second);
    pool_.erase(it);
    return s;
  }
  auto s = std::make_unique<Staging>();
  s->buffer = backend_.allocate(MemoryKind::communication, bytes);
  return s;
}

void ShardedState::give_back(std::unique_ptr<Staging> s) {
  const std::size_t size = s->buffer.size();
  pool_.emplace(size, std::move(s));
}

Tensor ShardedState::unit_tensor(const Buffer& buffer, DType dtype, int u) const {
  return buffer.view(dtype, Shape{params_.unit(u).size()});
}

Tensor ShardedState::owned(const Buffer& b, DType dtype, int u) const {
  return slice(b, dtype, chunks_[u].offset, chunks_[u].size);
}

void ShardedState::start_gather(int u) {
  const DType pt = params_.param_dtype();
  auto s = take_staging(params_.unit(u).size() * size_of(pt));
  const Tensor whole = unit_tensor(s->buffer, pt, u);
  if (shard_) s->pending = shard_->all_gather_async(owned(owned_params_, pt, u), whole);
  else backend_.copy(owned(owned_params_, pt, u), whole);
  gathered_[u] = std::move(s);
}

void ShardedState::acquire(int u, bool grads) {
  ++use_count_[u];
  if (stage_ == 3) {
    if (!gathered_[u]) start_gather(u);
    gathered_[u]->pending.wait();
    params_.bind_params(u, gathered_[u]->buffer.data());
    // Prefetch: the next layer in the direction of travel (forward up, backward down).
    const int next = grads ? u - 1 : u + 1;
    if (next >= 0 && next < params_.units() && !gathered_[next]) start_gather(next);
  }
  if (stage_ >= 2 && grads && !grad_stage_[u]) {
    const DType gt = params_.grad_dtype();
    grad_stage_[u] = take_staging(params_.unit(u).size() * size_of(gt));
    params_.bind_grads(u, grad_stage_[u]->buffer.data());
    params_.reset_written(u);  // the staging buffer is new this micro-batch
  }
}

void ShardedState::release(int u) {
  KINTSUGI_ASSERT(use_count_[u] > 0);
  if (--use_count_[u] > 0 || stage_ != 3) return;
  params_.bind_params(u, nullptr);
  give_back(std::move(gathered_[u]));
}

void ShardedState::reduce_sequence_parallel(int u) {
  if (!tp_.sequence_parallel()) return;
  const ParamUnit& unit = params_.unit(u);
  for (int i = unit.first_param; i < unit.end_param; ++i)
    if (params_.entry(i).spec.sequence_parallel_grad) tp_.group()->all_reduce(params_.grad(i));
}

void ShardedState::grads_final(int u, bool last) {
  const DType gt = params_.grad_dtype();
  if (stage_ <= 1) {
    if (!last) return;
    reduce_sequence_parallel(u);
    if (!shard_) return;
    if (stage_ == 0) launch_buckets(u);
    else if (!deferred_[u]) reduce_scatter_unit(u);
    return;
  }
  // Stages 2-3: every micro-batch, the staged gradient of the unit is reduce-scattered and its
  // shard accumulated; the staging buffer is reused once that is done.
  reduce_sequence_parallel(u);
  auto s = std::move(grad_stage_[u]);
  KINTSUGI_ASSERT(s != nullptr);
  params_.bind_grads(u, nullptr);
  const Tensor whole = unit_tensor(s->buffer, gt, u);
  const Tensor mine = slice(s->buffer, gt, shard_rank_ * chunks_[u].size, chunks_[u].size);
  if (shard_) s->pending = shard_->reduce_scatter_async(whole, mine);
  reducing_.push_back({u, std::move(s)});
  reclaim_grads(false);
}

void ShardedState::reduce_scatter_unit(int u) {
  // In place: the unit's reduced shard lands where it lies in the full buffer.
  const DType gt = params_.grad_dtype();
  reductions_.push_back(shard_->reduce_scatter_async(
      slice(full_grads_, gt, params_.unit(u).begin, params_.unit(u).size()),
      slice(full_grads_, gt, chunks_[u].begin, chunks_[u].size)));
}

void ShardedState::launch_buckets(int down_to_unit) {
  // Every bucket whose units are all final (units finish in descending order).
  const DType gt = params_.grad_dtype();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].first_unit >= down_to_unit) {
    const Bucket& b = buckets_[next_bucket_++];
    if (b.deferred) continue;
    const std::int64_t begin = params_.unit(b.first_unit).begin;
    const std::int64_t end = params_.unit(b.last_unit).end;
    reductions_.push_back(shard_->all_reduce_async(slice(full_grads_, gt, begin, end - begin)));
  }
}

void ShardedState::reclaim_grads(bool all) {
  const DType gt = params_.grad_dtype();
  // Two reductions in flight keep the communication thread busy while the next layer runs.
  while (!reducing_.empty() && (all || reducing_.size() > 2)) {
    PendingReduce p = std::move(reducing_.front());
    reducing_.pop_front();
    p.staging->pending.wait();
    const Tensor mine =
        slice(p.staging->buffer, gt, shard_rank_ * chunks_[p.unit].size, chunks_[p.unit].size);
    const Tensor acc = owned(owned_grads_, gt, p.unit);
    if (accumulated_[p.unit]) backend_.add(acc, mine, acc);
    else backend_.copy(mine, acc);
    accumulated_[p.unit] = 1;
    give_back(std::move(p.staging));
  }
}

void ShardedState::begin_step() {
  params_.begin_step();
  std::fill(accumulated_.begin(), accumulated_.end(), 0);
  next_bucket_ = 0;
}

void ShardedState::finish_reduction() {
  const DType gt = params_.grad_dtype();
  if (stage_ <= 1) {
    params_.zero_unwritten_grads(backend_);
    if (stage_ == 0 && shard_) launch_buckets(0);
    for (auto& h : reductions_) h.wait();
    reductions_.clear();
    if (replica_ && stage_ == 1)
      for (int u = 0; u < params_.units(); ++u)
        replica_->all_reduce(slice(full_grads_, gt, chunks_[u].begin, chunks_[u].size));
  } else {
    reclaim_grads(true);
    for (int u = 0; u < params_.units(); ++u)
      if (!accumulated_[u]) backend_.zero(owned(owned_grads_, gt, u));
    if (replica_) replica_->all_reduce(slice(owned_grads_, gt, 0, owned_total_));
  }
  drop_prefetched();
}

void ShardedState::drop_prefetched() {
  // Gathers prefetched but never used (past the last layer) are dropped.
  for (int u = 0; u < params_.units(); ++u)
    if (gathered_[u] && use_count_[u] == 0) {
      gathered_[u]->pending.wait();
      give_back(std::move(gathered_[u]));
    }
}

void ShardedState::grad_sum_squares(const Tensor& sum) const {
  const DType gt = params_.grad_dtype();
  for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    const ParamEntry& e = params_.entry(i);
    if (e.spec.tied_copy || (e.spec.split_dim < 0 && tp_.rank() != 0)) return;
    // The alignment gap after the tensor holds no gradient.
    const std::int64_t valid = std::min(a + n, e.offset + e.local_shape.numel()) - a;
    if (valid <= 0) return;
    const Tensor g = stage_ <= 1 ? slice(full_grads_, gt, a, valid)
                                 : slice(owned_grads_, gt, owned, valid);
    backend_.sum_squares(g, sum);
  });
}

void ShardedState::optimizer_step(double lr, double grad_scale) {
  adamw_->step(lr, grad_scale);
  gather_updated_params();
}

void ShardedState::gather_updated_params() {
  if (stage_ == 0 || stage_ == 3 || !shard_) return;
  // Stages 1-2: every rank updated its shard of the weights; gather them all, in place.
  const DType pt = params_.param_dtype();
  std::vector<CommHandle> gathers;
  for (int u = 0; u < params_.units(); ++u)
    gathers.push_back(shard_->all_gather_async(
        slice(full_params_, pt, chunks_[u].begin, chunks_[u].size),
        slice(full_params_, pt, params_.unit(u).begin, params_.unit(u).size())));
  for (auto& g : gathers) g.wait();
}

void ShardedState::acquire_everything() {
  for (int u = 0; u < params_.units(); ++u) acquire(u, false);
}

void ShardedState::release_everything() {
  for (int u = 0; u < params_.units(); ++u) release(u);
  drop_prefetched();
}

std::vector<ShardedState::StatePiece> ShardedState::state_pieces() const {
  // The same walk as build_optimizer: the optimizer state is these ranges, in this order.
  const DType pt = params_.param_dtype();
  std::vector<StatePiece> out;
  std::int64_t state_offset = 0;
  for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    const ParamEntry& e = params_.entry(i);
    // Alignment gaps after the tensor are optimizer state too (always zero): skip them.
    const std::int64_t valid = std::min(a + n, e.offset + e.local_shape.numel()) - a;
    if (valid > 0) {
    StatePiece p;
    p.param = i;
    p.begin = a - e.offset;
    p.count = valid;
    if (mixed_) p.weights = slice(master_, DType::f32, stage_ == 0 ? a : owned, valid);
    else if (stage_ <= 2) p.weights = slice(full_params_, pt, a, valid);
    else p.weights = slice(owned_params_, pt, owned, valid);
    p.m = adamw_->moment(0, state_offset, valid);
    p.v = adamw_->moment(1, state_offset, valid);
    out.push_back(p);
    }
    state_offset += n;
  });
  KINTSUGI_ASSERT(state_offset == adamw_->numel());
  return out;
}

bool ShardedState::writes_state() const {
  if (stage_ == 0) return shard_rank_ == 0;
  return !replica_ || replica_->rank() == 0;
}

void ShardedState::refresh_weights() {
  adamw_->refresh_working_copies();
  gather_updated_params();
}

}  // namespace kintsugi
