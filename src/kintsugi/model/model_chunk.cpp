#include "kintsugi/model/model_chunk.hpp"

#include <algorithm>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

ModelChunk::ModelChunk(Backend& backend, const ModelConfig& config, ChunkStorage storage,
                       std::int64_t micro_batch, std::int64_t seq, int slots, TensorParallel tp,
                       ChunkSpec spec, ActivationPool* shared, const TensorGrid* grid,
                       ContextParallel cp, Communicator* ep)
    : config_((validate(config), config)),
      spec_(spec),
      batch_(micro_batch),
      seq_(seq),
      params_(storage.unit_multiple),
      expert_params_(ep ? std::make_unique<ParamStore>(storage.expert_unit_multiple) : nullptr),
      ctx_{backend, params_, storage.compute, tp, grid, nullptr, cp, ep, expert_params_.get()} {
  if (spec_.num_layers < 0) spec_.num_layers = static_cast<int>(config.n_layer) - spec_.first_layer;
  KINTSUGI_ASSERT(spec_.first_layer >= 0 && spec_.first_layer + spec_.num_layers <= config.n_layer);
  KINTSUGI_ASSERT(seq > 0 && seq <= config.seq_len && micro_batch > 0 && slots > 0);
  KINTSUGI_ASSERT(seq % cp.size() == 0);
  KINTSUGI_ASSERT(!shared || shared->slots() == slots);
  if (!shared) own_pool_ = std::make_unique<ActivationPool>(backend, slots);
  ActivationPool& pool = shared ? *shared : *own_pool_;
  // Registration order is the layout of the flat buffers, one unit per layer: embeddings,
  // blocks, head.
  if (spec_.embedding) {
    embedding_ = std::make_unique<Embedding>(ctx_, config.vocab_size, config.padded_vocab(tp.size()),
                                             config.seq_len, config.d_model, config.init_std,
                                             config.learned_positions());
    if (config.embedding_norm())
      embedding_norm_ = std::make_unique<LayerNorm>(ctx_, "embedding.norm", config.d_model,
                                                    config.norm_eps);
    embedding_unit_ = params_.units();
    params_.end_unit("embedding");
  }
  first_block_unit_ = params_.units();
  for (int i = 0; i < spec_.num_layers; ++i) {
    blocks_.push_back(std::make_unique<TransformerBlock>(ctx_, config, spec_.first_layer + i,
                                                         spec_.moe_loss));
    params_.end_unit("blocks." + std::to_string(spec_.first_layer + i));
    if (expert_params_) {
      const int units = expert_params_->units();
      expert_params_->end_unit("blocks." + std::to_string(spec_.first_layer + i));
      expert_unit_.push_back(expert_params_->units() > units ? units : -1);
    }
  }
  if (spec_.head) {
    head_ = std::make_unique<LmHead>(ctx_, config, embedding_ ? embedding_->token_param() : -1);
    head_unit_ = params_.units();
    params_.end_unit("head");
  }
  // Everything but the grid layers' weights is replicated over the grid's z ranks, which see
  // different sequences.
  if (grid) params_.mark_replicated_over_depth(grid->coords().z);
  if (storage.allocate) params_.allocate_full(backend, storage.compute, storage.grad);
  else params_.set_storage(storage.compute, storage.grad, backend.device());
  if (expert_params_ && storage.allocate)
    expert_params_->allocate_full(backend, storage.compute, storage.grad);
  else if (expert_params_)
    expert_params_->set_storage(storage.compute, storage.grad, backend.device());
  grad_.assign(slots, {});

  const DType dtype = storage.compute;
  const std::int64_t local_seq = this->local_seq(), rows = micro_batch * local_seq,
                     local = tp.local_rows(rows);
  workspace_storage_ = carve(backend, MemoryKind::workspace, [&](Carver& c) {
    TransformerBlock::layout_workspace(c, ctx_, config, micro_batch, local_seq,
                                       storage.recompute, workspace_);
    for (auto& g : grad_) g = c.take(dtype, {local, config.d_model});
  });
  TransformerBlock::fill_workspace(ctx_, rows, workspace_);
  tokens_.assign(slots, {});
  targets_.assign(slots, {});
  doc_start_.assign(slots, {});
  positions_.assign(slots, {});
  rope_rows_.assign(slots, {});
  const bool documents = document_attention();
  // The ring rotates this rank's rows, which are not consecutive, at their positions.
  const bool rope_rows = cp.ring() && config.uses_rope() && !blocks_.empty();
  // Learned positions of rows that are not 0..seq-1 of each sequence are looked up by id.
  const bool positions =
      (documents || cp.active()) && embedding_ && embedding_->has_positions();
  batch_storage_ = carve(backend, MemoryKind::workspace, [&](Carver& c) {
    for (int s = 0; s < slots; ++s) {
      if (spec_.embedding) tokens_[s] = c.take(DType::i32, {rows});
      if (spec_.head) targets_[s] = c.take(DType::i32, {rows});
      // Attention sees whole sequences (context parallelism's exchange gathers them).
      if (documents) doc_start_[s] = c.take(DType::i32, {micro_batch * seq});
      if (positions) positions_[s] = c.take(DType::i32, {rows});
      if (rope_rows) rope_rows_[s] = c.take(DType::i32, {rows});
    }
  });
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->allocate_activations(pool, "block " + std::to_string(i), micro_batch, local_seq,
                                     storage.recompute, workspace_);
  if (documents)
    for (auto& block : blocks_)
      for (int s = 0; s < slots; ++s) block->set_documents(s, doc_start_[s]);
  if (rope_rows)
    for (auto& block : blocks_)
      for (int s = 0; s < slots; ++s) block->set_rope_rows(s, rope_rows_[s]);
  if (head_) head_->allocate(pool, rows);
  residual_.assign(slots, {});
  if (embedding_norm_) embedding_saved_.assign(slots, {});
  for (int s = 0; s < slots; ++s)
    pool.carve(s, "residual", [&](Carver& c) {
      residual_[s].clear();
      for (int i = 0; i <= spec_.num_layers; ++i)
        residual_[s].push_back(c.take(dtype, {local, config.d_model}));
      if (embedding_norm_)
        embedding_saved_[s] = {.raw = c.take(dtype, {local, config.d_model}),
                               .mean = c.take(ctx_.statistics(), {local}),
                               .rstd = c.take(ctx_.statistics(), {local})};
    });
}

void ModelChunk::acquire_block(std::size_t i, bool grads) const {
  acquire(first_block_unit_ + static_cast<int>(i), grads);
  if (expert_observer_ && expert_unit_[i] >= 0) expert_observer_->acquire(expert_unit_[i], grads);
}

void ModelChunk::release_block(std::size_t i) const {
  if (expert_observer_ && expert_unit_[i] >= 0) expert_observer_->release(expert_unit_[i]);
  release(first_block_unit_ + static_cast<int>(i));
}

void ModelChunk::block_grads_final(std::size_t i, bool last) const {
  grads_final(first_block_unit_ + static_cast<int>(i), last);
  if (expert_observer_ && expert_unit_[i] >= 0)
    expert_observer_->grads_final(expert_unit_[i], last);
}

void ModelChunk::load(int slot, const std::int32_t* tokens, const std::int32_t* targets) {
  // This rank's rows of each sequence (context parallelism's row map: one run of consecutive
  // positions, or the ring's two chunks per window), in the device buffer's order.
  const ContextParallel::RowMap map = ctx_.cp.rows(seq_);
  const std::int64_t local_seq = map.rows();
  auto keep = [&](const std::int32_t* all, const Tensor& device) {
    if (device.empty()) return;
    if (!ctx_.cp.active()) return copy_from_host(all, device);
    host_rows_.resize(static_cast<std::size_t>(rows()));
    for (std::int64_t b = 0; b < batch_; ++b)
      for (std::size_t k = 0; k < map.first.size(); ++k)
        std::copy_n(all + b * seq_ + map.first[k], map.chunk,
                    host_rows_.begin() + b * local_seq + static_cast<std::int64_t>(k) * map.chunk);
    copy_from_host(host_rows_.data(), device);
  };
  keep(tokens, tokens_[slot]);
  keep(targets, targets_[slot]);
  const bool documents = document_attention();
  if (positions_[slot].empty() && rope_rows_[slot].empty() && !documents) return;
  // Document starts over whole sequences (attention sees them all); positions of this rank's
  // rows, from each document's start (0 without documents).
  host_doc_start_.resize(static_cast<std::size_t>(batch_ * seq_));
  host_positions_.resize(static_cast<std::size_t>(rows()));
  host_rope_rows_.resize(static_cast<std::size_t>(rows()));
  for (std::int64_t b = 0; b < batch_; ++b) {
    std::int32_t start = 0;
    for (std::int32_t t = 0; t < seq_; ++t) {
      const std::int64_t r = b * seq_ + t;
      host_doc_start_[r] = start;
      if (documents && tokens[r] == spec_.document_end_id) start = t + 1;
    }
    for (std::int64_t i = 0; i < local_seq; ++i) {
      const std::int64_t t = map.position(i), row = b * local_seq + i;
      host_positions_[row] = static_cast<std::int32_t>(t - host_doc_start_[b * seq_ + t]);
      host_rope_rows_[row] = static_cast<std::int32_t>(i - host_positions_[row]);
    }
  }
  if (documents) copy_from_host(host_doc_start_.data(), doc_start_[slot]);
  if (!positions_[slot].empty()) copy_from_host(host_positions_.data(), positions_[slot]);
  if (!rope_rows_[slot].empty()) copy_from_host(host_rope_rows_.data(), rope_rows_[slot]);
}

Tensor ModelChunk::local_positions(int slot) const {
  if (positions_[slot].empty()) return {};
  const TensorParallel& tp = ctx_.tp;
  return positions_[slot].rows(tp.first_row(rows()), tp.local_rows(rows()));
}

Tensor ModelChunk::loss_sum() const {
  KINTSUGI_ASSERT(head_ != nullptr);
  return head_->loss_sum();
}

void ModelChunk::zero_loss() { ctx_.backend.zero(loss_sum()); }

void ModelChunk::forward(int slot, bool training, double grad_scale, bool score) {
  const TensorParallel& tp = ctx_.tp;
  auto& x = residual_[slot];
  // The embedding unit stays acquired until backward (the tied head writes its gradient in the
  // forward pass); the head's until its backward, which follows the fused loss.
  if (embedding_) {
    acquire(embedding_unit_, training);
    // Vocabulary-parallel lookup: each rank contributes the rows of the ids it owns. With an
    // embedding norm the sum lands before it and the norm writes the chunk's input.
    const Tensor embedded = embedding_norm_ ? embedding_saved_[slot].raw : x[0];
    const Tensor partial = tp.sequence_parallel() ? workspace_.full : embedded;
    embedding_->lookup(tokens_[slot], partial);
    tp.leave(partial, embedded);
    // With documents, positions are ids looked up through the backward workspace's full-row
    // gradient buffer, unused until backward.
    const std::int64_t first_row = tp.first_row(rows());
    embedding_->add_positions(embedded, seq_, first_row, local_positions(slot),
                              workspace_.d_norm_full);
    if (embedding_norm_) {
      const EmbeddingNormSaved& e = embedding_saved_[slot];
      embedding_norm_->forward(e.raw, x[0], e.mean, e.rstd);
    }
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (training && blocks_[i]->moe()) blocks_[i]->moe()->set_grad_scale(grad_scale);
    acquire_block(i, false);
    blocks_[i]->forward(slot, x[i], x[i + 1], workspace_);
    release_block(i);
  }
  score = score && head_;
  if (score) {
    acquire(head_unit_, training);
    if (training)
      head_->forward_backward(slot, x.back(), targets_[slot], grad_scale);
    else
      head_->forward_loss(slot, x.back(), targets_[slot]);
  }
  if (!training) {
    if (score) release(head_unit_);
    if (embedding_) release(embedding_unit_);
  }
}

std::vector<MoeStats> ModelChunk::moe_stats() const {
  std::vector<MoeStats> out;
  for (const auto& b : blocks_)
    if (b->moe()) out.push_back(b->moe()->stats());
  return out;
}

void ModelChunk::reset_moe_stats() {
  for (const auto& b : blocks_)
    if (b->moe()) b->moe()->reset_stats();
}

void ModelChunk::set_moe_router_bias(const std::vector<float>& bias) {
  const auto experts = static_cast<std::size_t>(config().moe.experts);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    MoeLayer* moe = blocks_[i]->moe();
    if (!moe || !moe->has_router_bias()) continue;
    const std::size_t layer = static_cast<std::size_t>(spec().first_layer) + i;
    KINTSUGI_ASSERT(bias.size() >= (layer + 1) * experts);
    moe->set_router_bias(std::vector<float>(bias.begin() + static_cast<std::ptrdiff_t>(layer * experts),
                                            bias.begin() + static_cast<std::ptrdiff_t>((layer + 1) * experts)));
  }
}

void ModelChunk::extend(int slot, std::int64_t first, std::int64_t count) {
  KINTSUGI_ASSERT(embedding_ && batch_ == 1 && first >= 0 && count >= 1 && first + count <= seq_ &&
                  !ctx_.cp.active());
  auto& x = residual_[slot];
  auto rows = [first, count](const Tensor& t) { return t.rows(first, count); };
  const Tensor embedded = embedding_norm_ ? rows(embedding_saved_[slot].raw) : rows(x[0]);
  embedding_->lookup(rows(tokens_[slot]), embedded);
  embedding_->add_positions(embedded, seq_, first);
  if (embedding_norm_) {
    const EmbeddingNormSaved& e = embedding_saved_[slot];
    embedding_norm_->forward(embedded, rows(x[0]), rows(e.mean), rows(e.rstd));
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->extend(slot, x[i], x[i + 1], first, count, workspace_);
}

void ModelChunk::backward(int slot, bool last_micro_batch) {
  auto& x = residual_[slot];
  const Tensor d = grad_[slot];
  if (head_) {
    head_->backward(slot, x.back(), d);
    grads_final(head_unit_, last_micro_batch);
    release(head_unit_);
  }
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    acquire_block(i, true);
    blocks_[i]->backward(slot, x[i], d, workspace_);
    block_grads_final(i, last_micro_batch);
    release_block(i);
  }
  if (embedding_) {
    const TensorParallel& tp = ctx_.tp;
    Tensor d_embedded = d;
    if (embedding_norm_) {
      // The norm's backward accumulates into its input gradient, which starts at zero here
      // (the residual-gradient workspace is free once the blocks are done).
      const EmbeddingNormSaved& e = embedding_saved_[slot];
      d_embedded = workspace_.d_norm;
      ctx_.backend.zero(d_embedded);
      embedding_norm_->backward(d, e.raw, e.mean, e.rstd, d_embedded);
    }
    embedding_->backward_positions(d_embedded, seq_, tp.first_row(rows()),
                                   local_positions(slot));
    const Tensor d_full = tp.sequence_parallel() ? workspace_.full : d_embedded;
    tp.leave_backward(d_embedded, d_full);
    embedding_->backward_lookup(tokens_[slot], d_full);
    grads_final(embedding_unit_, last_micro_batch);
    release(embedding_unit_);
  }
}

}  // namespace kintsugi
