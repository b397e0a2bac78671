#include "kintsugi/model/model_chunk.hpp"

namespace kintsugi {

ModelChunk::ModelChunk(Backend& backend, const ModelConfig& config, DType dtype,
                       std::int64_t micro_batch, std::int64_t seq, int slots, TensorParallel tp,
                       ChunkSpec spec)
    : config_((validate(config), config)),
      spec_(spec),
      batch_(micro_batch),
      seq_(seq),
      ctx_{backend, params_, dtype, tp} {
  if (spec_.num_layers < 0) spec_.num_layers = static_cast<int>(config.n_layer) - spec_.first_layer;
  KINTSUGI_ASSERT(spec_.first_layer >= 0 && spec_.first_layer + spec_.num_layers <= config.n_layer);
  KINTSUGI_ASSERT(seq > 0 && seq <= config.seq_len && micro_batch > 0 && slots > 0);
  // Registration order is the layout of the flat buffers: embeddings, blocks, head.
  if (spec_.embedding)
    embedding_ = std::make_unique<Embedding>(ctx_, config.vocab_size, config.padded_vocab(tp.size()),
                                             config.seq_len, config.d_model, config.init_std);
  for (int i = 0; i < spec_.num_layers; ++i) {
    block_first_param_.push_back(params_.size());
    blocks_.push_back(std::make_unique<TransformerBlock>(ctx_, config, spec_.first_layer + i));
  }
  head_first_param_ = params_.size();
  if (spec_.head)
    head_ = std::make_unique<LmHead>(ctx_, config, embedding_ ? embedding_->token_param() : -1);
  params_.allocate(backend, dtype);

  const std::int64_t rows = micro_batch * seq, local = tp.local_rows(rows);
  for (auto& block : blocks_) block->allocate_activations(slots, micro_batch, seq);
  if (head_) head_->allocate(slots, rows);
  residual_.assign(slots, {});
  grad_.assign(slots, {});
  for (int s = 0; s < slots; ++s)
    residual_storage_.push_back(carve(backend, MemoryKind::activations, [&](Carver& c) {
      residual_[s].clear();
      for (int i = 0; i <= spec_.num_layers; ++i)
        residual_[s].push_back(c.take(dtype, {local, config.d_model}));
    }));
  workspace_storage_ = carve(backend, MemoryKind::workspace, [&](Carver& c) {
    TransformerBlock::layout_workspace(c, ctx_, config, rows, workspace_);
    for (auto& g : grad_) g = c.take(dtype, {local, config.d_model});
  });
}

double ModelChunk::forward(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                           bool training, double grad_scale) {
  const TensorParallel& tp = ctx_.tp;
  auto& x = residual_[slot];
  if (embedding_) {
    // Vocabulary-parallel lookup: each rank contributes the rows of the ids it owns.
    const Tensor partial = tp.sequence_parallel() ? workspace_.full : x[0];
    embedding_->lookup(tokens, partial);
    tp.leave(partial, x[0]);
    embedding_->add_positions(x[0], seq_, tp.first_row(batch_ * seq_));
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->forward(slot, x[i], x[i + 1], workspace_);
  if (!head_ || !targets) return 0.0;  // no targets: the caller wants the activations only
  return training ? head_->forward_backward(slot, x.back(), targets, grad_scale)
                  : head_->forward_loss(slot, x.back(), targets);
}

void ModelChunk::backward(int slot, const std::int32_t* tokens, bool last_micro_batch) {
  auto& x = residual_[slot];
  const Tensor d = grad_[slot];
  if (head_) {
    head_->backward(slot, x.back(), d);
    notify_final(last_micro_batch, head_first_param_);
  }
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i]->backward(slot, x[i], d, workspace_);
    notify_final(last_micro_batch, block_first_param_[i]);
  }
  if (embedding_) {
    const TensorParallel& tp = ctx_.tp;
    embedding_->backward_positions(d, seq_, tp.first_row(batch_ * seq_));
    const Tensor d_full = tp.sequence_parallel() ? workspace_.full : d;
    tp.leave_backward(d, d_full);
    embedding_->backward_lookup(tokens, d_full);
    notify_final(last_micro_batch, 0);
  }
}

}  // namespace kintsugi
