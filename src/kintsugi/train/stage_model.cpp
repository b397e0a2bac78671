#include "kintsugi/train/stage_model.hpp"

#include <cmath>

#include "kintsugi/core/host_io.hpp"

#include "kintsugi/optim/grad_clip.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/train_data.hpp"

namespace kintsugi {

StageModel::StageModel(Backend& backend, const RunConfig& c, const Place& place, Tracer& tracer)
    : backend_(backend),
      place_(place),
      schedule_(c.parallel.schedule),
      virtual_stages_(static_cast<int>(c.parallel.virtual_stages)) {
  const int p = place.pp_size, v = virtual_stages_;
  const ModelConfig& m = c.model;
  partition_ = partition_stages(m, p, v, m.seq_len, c.parallel.layers_per_stage);
  const PipelineShape shape{p, v,
                            static_cast<int>(c.train.global_batch /
                                             (c.train.micro_batch * place.dp_size))};
  // Data-parallel state is sharded over the whole group, or over the hybrid-sharding groups
  // that replicate each other (comm/topology.hpp).
  const ZeroStage zero = c.parallel.zero;
  const bool sharded = zero > ZeroStage::none;
  const ShardingConfig sharding{
      .stage = zero,
      .shard = sharded && place.shard ? place.shard : place.data,
      .replica = sharded ? place.replica : nullptr,
      .bucket_bytes = static_cast<std::size_t>(c.comm.bucket_mib * 1048576.0),
      .depth = place.grid ? &place.grid->z() : nullptr};
  // 3D tensor parallelism: the chunks' embedding, head and loss are vocabulary-parallel over
  // the grid's xy plane, and each z rank runs its share of a micro-batch's sequences.
  const TensorParallel chunk_tp =
      place.grid ? TensorParallel(place.grid->plane(), false) : place.tp;
  const std::int64_t chunk_batch = c.train.micro_batch / place.depth_size;
  const int shards = sharding.shard ? sharding.shard->size() : 1;
  // Expert parallelism (docs/moe.md): the experts' gradients are summed, and their ZeRO state
  // sharded, over the dp / ep ranks that hold the same experts.
  const ShardingConfig expert_sharding{
      .stage = zero,
      .shard = place.edp,
      .bucket_bytes = sharding.bucket_bytes};
  const int expert_shards = place.edp ? place.edp->size() : 1;
  // Mixed precision: weights and activations in 16 bits; gradients accumulated in f32 unless
  // train.grad_precision = "param". fp16 needs loss scaling to keep small gradients.
  const DType compute = compute_dtype(c.train.precision);
  const DType grad = grad_dtype(c.train.precision, c.train.grad_precision);
  if (compute == DType::f16) scaler_ = LossScaler(c.train.loss_scale, c.train.loss_scale_window);
  // The chunks share one pool of activation slots, as many as the schedule keeps
  // (chunk, micro-batch) pairs in flight at once on this rank.
  const int slots = activation_slots(schedule_, shape, place.pp_rank);
  activation_pool_ = std::make_unique<ActivationPool>(backend, slots);
  const std::int32_t end_of_document = document_end_id(c.data);
  for (int chunk = 0; chunk < v; ++chunk) {
    const int g = global_chunk(shape, place.pp_rank, chunk);
    const ChunkSpec spec{.first_layer = partition_.first_layer[g],
                         .num_layers = partition_.num_layers[g],
                         .embedding = g == 0,
                         .head = g == p * v - 1,
                         .document_end_id = end_of_document,
                         .moe_loss = {.aux = c.train.moe_aux_loss_coeff,
                                      .z = c.train.moe_z_loss_coeff}};
    const ChunkStorage storage{.compute = compute,
                               .grad = grad,
                               .allocate = false,
                               .unit_multiple = 16 * (sharded ? shards : 1),
                               .recompute = c.train.recompute,
                               .expert_unit_multiple = 16 * (sharded ? expert_shards : 1)};
    chunks_.push_back(std::make_unique<ModelChunk>(
        backend, m, storage, chunk_batch, m.seq_len, slots, chunk_tp, spec,
        activation_pool_.get(), place.grid,
        place.cp ? ContextParallel(*place.cp, c.parallel.cp_comm,
                                   ContextParallel::ring_windows(m.seq_len, place.cp->size(),
                                                                 end_of_document >= 0))
                 : ContextParallel{},
        place.ep));
    ModelChunk& model = *chunks_.back();
    const OptimizerConfig optimizer{.kind = c.train.optimizer, .beta1 = c.train.beta1,
                                    .beta2 = c.train.beta2, .eps = c.train.eps,
                                    .weight_decay = c.train.weight_decay};
    states_.push_back(std::make_unique<ShardedState>(backend, model.params(), sharding, place.tp,
                                                     optimizer,
                                                     static_cast<std::uint64_t>(c.train.seed)));
    if (model.expert_params()) {
      expert_states_.push_back(std::make_unique<ShardedState>(
          backend, *model.expert_params(), expert_sharding, place.tp, optimizer,
          static_cast<std::uint64_t>(c.train.seed)));
      model.set_expert_observer(expert_states_.back().get());
    }
    model.set_observer(states_.back().get());
    model.set_tracer(&tracer);
    // The tied token table's two copies (first and last stage) are summed before the
    // data-parallel reduction of their units (untied families, Llama, have no second copy).
    const int tied = model.params().find("embedding.token.weight");
    if (place.embedding && m.tied_embeddings() && tied >= 0) states_.back()->defer_unit(model.params().entry(tied).unit);
  }
  std::vector<ModelChunk*> raw;
  for (auto& ch : chunks_) raw.push_back(ch.get());
  executor_ = std::make_unique<PipelineExecutor>(raw, shape, place.pp_rank, place.pp, tracer);
  grad_sum_squares_ = backend.allocate(MemoryKind::workspace, sizeof(double));
  const ModelConfig& m0 = c.model;
  if (m0.is_moe() && m0.moe.bias_update_rate > 0)
    moe_router_bias_.assign(static_cast<std::size_t>(m0.n_layer * m0.moe.experts), 0.0f);
}

void StageModel::set_moe_router_bias(const std::vector<float>& bias) {
  KINTSUGI_ASSERT(bias.size() == moe_router_bias_.size());
  moe_router_bias_ = bias;
  for (auto& chunk : chunks_) chunk->set_moe_router_bias(moe_router_bias_);
}

void StageModel::update_moe_router_bias(const std::vector<double>& stats) {
  // DeepSeek-V3's auxiliary-loss-free balancing (docs/moe.md, "DeepSeek-style routing"): each
  // layer's expert e moves by rate x sign(mean load - load_e), the loads being the step's
  // routed rows summed over every micro-batch and rank (StepResult::moe), so every rank and
  // layout takes the same step.
  const ModelConfig& m = chunks_.front()->config();
  const auto experts = static_cast<std::size_t>(m.moe.experts);
  const std::size_t width = 4 + experts;
  const auto rate = static_cast<float>(m.moe.bias_update_rate);
  // The bias table has a row per block (a dense block's unused), the stats one per MoE block.
  std::size_t row = 0;
  for (std::size_t l = 0; l < static_cast<std::size_t>(m.n_layer); ++l) {
    if (!m.is_moe_block(static_cast<std::int64_t>(l))) continue;
    const double* load = stats.data() + row++ * width + 4;
    double total = 0;
    for (std::size_t e = 0; e < experts; ++e) total += load[e];
    const double mean = total / static_cast<double>(experts);
    for (std::size_t e = 0; e < experts; ++e) {
      float& b = moe_router_bias_[l * experts + e];
      if (load[e] < mean) b += rate;
      if (load[e] > mean) b -= rate;
    }
  }
  for (auto& chunk : chunks_) chunk->set_moe_router_bias(moe_router_bias_);
}

double StageModel::moe_router_bias_max_abs() const {
  double most = 0;
  for (float b : moe_router_bias_) most = std::max(most, static_cast<double>(std::abs(b)));
  return most;
}

std::vector<const ParamStore*> StageModel::params() const {
  std::vector<const ParamStore*> out;
  for (const auto& c : chunks_) out.push_back(&c->params());
  for (const auto& c : chunks_)
    if (c->expert_params()) out.push_back(c->expert_params());
  return out;
}

std::vector<const ParamStore*> StageModel::chunk_params() const {
  std::vector<const ParamStore*> out;
  for (const auto& c : chunks_) out.push_back(&c->params());
  return out;
}

std::vector<const ParamStore*> StageModel::expert_params() const {
  std::vector<const ParamStore*> out;
  for (const auto& c : chunks_)
    if (c->expert_params()) out.push_back(c->expert_params());
  return out;
}

ShardedState& StageModel::any_state(int i) {
  const int n = static_cast<int>(states_.size());
  return i < n ? *states_[i] : *expert_states_[i - n];
}

void StageModel::acquire_all_params() {
  for (auto& s : states_) s->acquire_everything();
  for (auto& s : expert_states_) s->acquire_everything();
}

void StageModel::release_all_params() {
  for (auto& s : states_) s->release_everything();
  for (auto& s : expert_states_) s->release_everything();
}

double StageModel::sum_over_job(double v) const {
  // The grid's z ranks score different sequences; its xy ranks the same ones.
  Communicator* depth = place_.grid && place_.depth_size > 1 ? &place_.grid->z() : nullptr;
  for (Communicator* g : {place_.pp, place_.data, depth})
    if (g) v = g->host_all_reduce(v);
  return v;
}

void StageModel::reduce_grads() {
  // The two copies of the tied token embedding (first and last stage) sum their gradients,
  // then their units join the data-parallel reduction.
  Communicator* tied = chunks_.front()->config().tied_embeddings() ? place_.embedding : nullptr;
  if (tied)
    for (auto& chunk : chunks_) {
      const int i = chunk->params().find("embedding.token.weight");
      if (i >= 0) tied->all_reduce(chunk->params().grad(i));
    }
  for (auto& s : states_) {
    s->reduce_deferred();
    s->finish_reduction();
  }
  for (auto& s : expert_states_) s->finish_reduction();
}

void StageModel::optimizer_step() {
  // Sum of squares over this rank's chunks, then over the ranks holding other parts of the
  // gradient: the shard group (ZeRO), tensor-parallel ranks, pipeline stages.
  const Tensor local = grad_sum_squares_.view(DType::f64, Shape{1});
  backend_.zero(local);
  for (auto& s : states_) s->grad_sum_squares(local);
  double sum = read_scalar(local);
  if (auto* g = states_.front()->norm_group()) sum = g->host_all_reduce(sum);
  if (!expert_states_.empty()) {
    // Expert parallelism: the experts' squares, over the ep ranks (other experts) and under
    // ZeRO the dp / ep ranks (other shards), then added.
    backend_.zero(local);
    for (auto& s : expert_states_) s->grad_sum_squares(local);
    double experts = read_scalar(local);
    for (Communicator* g : {place_.ep, expert_states_.front()->norm_group()})
      if (g) experts = g->host_all_reduce(experts);
    sum += experts;
  }
  for (Communicator* g : {place_.tp.group(), place_.pp})
    if (g) sum = g->host_all_reduce(sum);
  // Every rank sees the same sum, so every rank takes the same decision to skip.
  const double scale = scaler_.scale();
  skipped_ = !scaler_.update(std::sqrt(sum));
  grad_norm_ = std::sqrt(sum) / scale;
  if (skipped_) return;
  const double factor = clip_factor(grad_norm_, grad_clip_) / scale;
  for (auto& s : states_) s->optimizer_step(lr_, factor);
  for (auto& s : expert_states_) s->optimizer_step(lr_, factor);
}

StageModel::StepResult StageModel::train_step(const Sampler& sample, int micro_batches,
                                              double grad_scale, double lr, double grad_clip) {
  lr_ = lr;
  grad_clip_ = grad_clip;
  const double loss_scale = scaler_.scale();
  for (auto& s : states_) s->begin_step();
  for (auto& s : expert_states_) s->begin_step();
  const PipelineShape shape{place_.pp_size, virtual_stages_, micro_batches};
  const auto program = make_schedule(schedule_, shape, place_.pp_rank);
  zero_loss();
  for (auto& chunk : chunks_) chunk->reset_moe_stats();
  PipelineExecutor::Hooks hooks = stop_hooks(stop_check_);
  hooks.sample = sample;
  hooks.reduce_grads = [this] { reduce_grads(); };
  hooks.optimizer_step = [this] { optimizer_step(); };
  interrupted_ = !executor_->run(program, true, grad_scale * loss_scale, hooks);
  if (interrupted_) return {0, 0, false, loss_scale};  // every rank stopped at the same place
  StepResult result{sum_over_job(local_loss()), grad_norm_, skipped_, loss_scale, moe_stats()};
  // A skipped step (fp16 overflow) leaves the weights and so the balancing bias as they were.
  if (!moe_router_bias_.empty() && !skipped_) update_moe_router_bias(result.moe);
  for (const auto& chunk : chunks_)
    for (const MoeStats& st : chunk->moe_stats()) {
      result.moe_rows_sent += st.rows_sent;
      result.moe_rows_received += st.rows_received;
      result.moe_forwards += st.micro_batches;
    }
  return result;
}

std::vector<double> StageModel::moe_stats() const {
  const ModelConfig& m = chunks_.front()->config();
  if (!m.is_moe()) return {};
  const std::size_t width = 4 + static_cast<std::size_t>(m.moe.experts);
  // A row per MoE block, in block order (dense blocks have none: docs/moe.md, "Dense blocks").
  std::vector<double> all(static_cast<std::size_t>(m.moe_blocks()) * width, 0.0);
  for (const auto& chunk : chunks_) {
    const std::vector<MoeStats> stats = chunk->moe_stats();
    const auto before = static_cast<std::size_t>(m.moe_blocks(0, chunk->spec().first_layer));
    for (std::size_t i = 0; i < stats.size(); ++i) {
      double* row = all.data() + (before + i) * width;
      row[0] = stats[i].aux_sum;
      row[1] = stats[i].z_sum;
      row[2] = static_cast<double>(stats[i].micro_batches);
      row[3] = static_cast<double>(stats[i].dropped);
      for (std::size_t e = 0; e < stats[i].expert_rows.size(); ++e)
        row[4 + e] = static_cast<double>(stats[i].expert_rows[e]);
    }
  }
  Communicator* depth = place_.grid && place_.depth_size > 1 ? &place_.grid->z() : nullptr;
  for (Communicator* g : {place_.pp, place_.data, depth})
    if (g) g->host_all_reduce(all, ReduceOp::sum);
  return all;
}

PipelineExecutor::Hooks StageModel::stop_hooks(const std::function<bool(int)>& checked) const {
  if (!checked) return {};
  // A sum over the group of flags; with a pipeline, over this stage's data-parallel ranks and
  // then its tensor-parallel ranks, which makes it this stage's whole group.
  auto any = [this](bool flag, bool job) {
    double n = flag ? 1.0 : 0.0;
    if (!place_.topology) return n > 0;
    if (job || !place_.pp) return place_.topology->world().host_all_reduce(n) > 0;
    if (place_.data) n = place_.data->host_all_reduce(n);
    if (place_.tp.group()) n = place_.tp.group()->host_all_reduce(n);
    return n > 0;
  };
  return {.stop = [checked, any](int mb) { return checked(mb) && any(stop_requested(), false); },
          .any_abandoned = [any](bool here) { return any(here, true); }};
}

void StageModel::zero_loss() {
  if (chunks_.back()->spec().head) chunks_.back()->zero_loss();
}

double StageModel::local_loss() const {
  const ModelChunk& last = *chunks_.back();
  return last.spec().head ? read_scalar(last.loss_sum()) : 0.0;
}

double StageModel::evaluate(const Sampler& sample, int micro_batches, int shared_micro_batches,
                            int lockstep_micro_batches) {
  KINTSUGI_ASSERT(0 <= shared_micro_batches && shared_micro_batches <= micro_batches &&
                  micro_batches <= lockstep_micro_batches);
  // Micro-batches first..first+count-1 as one forward-only program.
  auto forward = [&](int first, int count, const std::function<bool(int)>& stop) {
    const PipelineShape shape{place_.pp_size, virtual_stages_, count};
    PipelineExecutor::Hooks hooks = stop_hooks(stop);
    hooks.sample = [&](int k, std::int32_t* tokens, std::int32_t* targets) {
      sample(first + k, tokens, targets);
    };
    return executor_->run(make_forward_schedule(shape, place_.pp_rank), false, 0.0, hooks);
  };
  zero_loss();
  // The micro-batches every data-parallel rank has, in one program on every rank of the job:
  // the stop check is a collective of the ranks that run them, and with a pipeline the program
  // ends with a collective of the whole job (PipelineExecutor::Hooks::any_abandoned), so a rank
  // must run this program whenever any rank does, and only then (the count is the same on
  // every rank: with none, no rank runs it). A rank with no share of its own still takes part.
  interrupted_ =
      shared_micro_batches > 0 && !forward(0, shared_micro_batches, stop_check_);
  if (interrupted_) return 0;
  // This rank's own remaining micro-batches: without stop checks or any other collective
  // outside its own pipeline (whose stages all have the same share), so ranks with different
  // shares never wait for each other here.
  if (micro_batches > shared_micro_batches)
    forward(shared_micro_batches, micro_batches - shared_micro_batches, {});
  const double loss = local_loss();  // before the lockstep forwards, whose losses are dropped
  // Expert parallelism exchanges rows with the ep ranks in every forward: the same lockstep.
  const bool lockstep = states_.front()->stage() == ZeroStage::parameters || place_.ep;
  if (lockstep && lockstep_micro_batches > micro_batches)
    forward(micro_batches, lockstep_micro_batches - micro_batches, {});
  return sum_over_job(loss);
}

}  // namespace kintsugi
