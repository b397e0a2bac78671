#include "kintsugi/parallel/sharded_state.hpp"

#include <algorithm>

#include "kintsugi/core/host_io.hpp"
#include "kintsugi/optim/multi_tensor.hpp"

namespace kintsugi {

namespace {

bool low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

Communicator* group_of_several(Communicator* c) { return c && c->size() > 1 ? c : nullptr; }

}  // namespace

ShardedState::ShardedState(Backend& backend, ParamStore& params, const ShardingConfig& config,
                           const TensorParallel& tp, const OptimizerConfig& optimizer,
                           std::uint64_t seed)
    : backend_(backend),
      params_(params),
      tp_(tp),
      shard_(group_of_several(config.shard)),
      replica_(group_of_several(config.replica)),
      depth_(group_of_several(config.depth)),
      mixed_(low_precision(params.param_dtype())),
      map_(params, config.stage, shard_ ? shard_->size() : 1, shard_ ? shard_->rank() : 0),
      pool_(backend),
      params_storage_(make_param_storage(backend, params, map_, shard_, pool_)),
      grads_(make_grad_storage(backend, params, map_, shard_, replica_, config.bucket_bytes,
                               pool_)) {
  if (mixed_) {
    const std::int64_t updated = stage() >= ZeroStage::optimizer ? map_.owned_total() : params.numel();
    master_ = backend.allocate(MemoryKind::optimizer_state, updated * sizeof(float));
  }
  params_storage_->initialize(seed);
  initialize_master(seed);
  build_optimizer(optimizer);
  build_norm_ranges();
}

Tensor ShardedState::master(std::int64_t a, std::int64_t n, std::int64_t owned) const {
  const std::int64_t at = stage() == ZeroStage::none ? a : owned;
  return master_.view(DType::f32, Shape{n}, static_cast<std::size_t>(at) * sizeof(float));
}

void ShardedState::initialize_master(std::uint64_t seed) {
  if (!mixed_) return;
  // The master copy starts from the same f32 draws the working copy was rounded from.
  std::vector<float> values;
  map_.for_each_updated_range([&](int, std::int64_t a, std::int64_t n, std::int64_t owned) {
    values.resize(static_cast<std::size_t>(n));
    params_.initial_values(seed, a, a + n, values.data());
    write_values(values.data(), master(a, n, owned));
  });
}

void ShardedState::build_optimizer(const OptimizerConfig& config) {
  std::vector<OptimizerSegment> segments;
  map_.for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    OptimizerSegment s;
    s.decay = params_.entry(i).spec.weight_decay;
    const Tensor weights = params_storage_->weights(a, n, owned);
    s.grad = grads_->grads(a, n, owned);
    if (mixed_) {
      s.param = master(a, n, owned);
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
      OptimizerSegment& prev = segments.back();
      prev.param.shape = Shape{prev.param.numel() + n};
      prev.grad.shape = Shape{prev.grad.numel() + n};
      if (mixed_) prev.working_copy.shape = Shape{prev.working_copy.numel() + n};
    } else {
      segments.push_back(s);
    }
  });
  optimizer_ = make_optimizer(backend_, segments, config);
}

void ShardedState::acquire(int u, bool grads) {
  params_storage_->acquire(u, grads);
  if (grads) grads_->acquire(u);
}

void ShardedState::release(int u) { params_storage_->release(u); }

void ShardedState::reduce_partial_grads(int u) {
  const ParamUnit& unit = params_.unit(u);
  for (int i = unit.first_param; i < unit.end_param; ++i) {
    const ParamSpec& spec = params_.entry(i).spec;
    if ((tp_.sequence_parallel() && spec.sequence_parallel_grad) ||
        (tp_.size() > 1 && spec.head_partial_grad))
      tp_.group()->all_reduce(params_.grad(i));
    // 3D tensor parallelism: each z rank's gradient comes from its own token rows.
    if (depth_ && spec.depth_partial_grad) depth_->all_reduce(params_.grad(i));
  }
}

void ShardedState::grads_final(int u, bool last) {
  if (!last && !grads_->reduces_every_micro_batch()) return;
  reduce_partial_grads(u);
  grads_->reduce(u);
}

void ShardedState::begin_step() {
  params_.begin_step();
  grads_->begin_step();
}

void ShardedState::finish_reduction() {
  grads_->finish_reduction();
  params_storage_->drop_prefetched();
}

void ShardedState::build_norm_ranges() {
  map_.for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    const ParamEntry& e = params_.entry(i);
    if (e.spec.tied_copy || e.spec.duplicate || (e.spec.split_dim < 0 && tp_.rank() != 0)) return;
    // The alignment gap after the tensor holds no gradient.
    const std::int64_t valid = std::min(a + n, e.offset + e.local_shape.numel()) - a;
    if (valid > 0) norm_ranges_.push_back(grads_->grads(a, valid, owned));
  });
}

void ShardedState::grad_sum_squares(const Tensor& sum) const {
  // One range per parameter, not merged with its neighbours: the sum keeps the order (and the
  // bits) of one sum_squares per parameter, whichever path takes it.
  if (multi_tensor_ops()) return backend_.sum_squares_multi(norm_ranges_, sum);
  for (const Tensor& g : norm_ranges_) backend_.sum_squares(g, sum);
}

void ShardedState::optimizer_step(double lr, double grad_scale) {
  optimizer_->step(lr, grad_scale);
  params_storage_->gather_updated();
}

void ShardedState::acquire_everything() {
  for (int u = 0; u < params_.units(); ++u) acquire(u, false);
}

void ShardedState::release_everything() {
  for (int u = 0; u < params_.units(); ++u) release(u);
  params_storage_->drop_prefetched();
}

std::vector<ShardedState::StatePiece> ShardedState::state_pieces() const {
  // The same walk as build_optimizer: the optimizer state is these ranges, in this order.
  std::vector<StatePiece> out;
  std::int64_t state_offset = 0;
  map_.for_each_updated_range([&](int i, std::int64_t a, std::int64_t n, std::int64_t owned) {
    const ParamEntry& e = params_.entry(i);
    // Alignment gaps after the tensor are optimizer state too (always zero): skip them.
    const std::int64_t valid = std::min(a + n, e.offset + e.local_shape.numel()) - a;
    if (valid > 0)
      out.push_back({.param = i,
                     .begin = a - e.offset,
                     .count = valid,
                     .weights = mixed_ ? master(a, valid, owned)
                                       : params_storage_->weights(a, valid, owned),
                     .m = optimizer_->moment(0, state_offset, valid),
                     .v = optimizer_->moments() > 1 ? optimizer_->moment(1, state_offset, valid)
                                                    : Tensor{}});
    state_offset += n;
  });
  KINTSUGI_ASSERT(state_offset == optimizer_->numel());
  return out;
}

bool ShardedState::writes_state() const {
  if (stage() == ZeroStage::none) return map_.rank() == 0;
  return !replica_ || replica_->rank() == 0;
}

void ShardedState::refresh_weights() {
  optimizer_->refresh_working_copies();
  params_storage_->gather_updated();
}

}  // namespace kintsugi
