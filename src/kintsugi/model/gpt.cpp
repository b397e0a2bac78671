#include "kintsugi/model/gpt.hpp"

namespace kintsugi {

GptModel::GptModel(Backend& backend, const ModelConfig& config, DType dtype,
                   std::int64_t micro_batch, std::int64_t seq, int slots, TensorParallel tp)
    : config_((validate(config), config)),
      batch_(micro_batch),
      seq_(seq),
      ctx_{backend, params_, dtype, tp},
      embedding_(ctx_, config.vocab_size, config.padded_vocab(tp.size()), config.seq_len,
                 config.d_model, config.init_std),
      blocks_([&] {
        std::vector<std::unique_ptr<TransformerBlock>> blocks;
        for (int i = 0; i < config.n_layer; ++i) {
          block_first_param_.push_back(params_.size());
          blocks.push_back(std::make_unique<TransformerBlock>(ctx_, config, i));
        }
        return blocks;
      }()),
      head_first_param_(params_.size()),
      head_(ctx_, config, embedding_.token_param(), embedding_.vocab_begin()) {
  KINTSUGI_ASSERT(seq > 0 && seq <= config.seq_len && micro_batch > 0 && slots > 0);
  params_.allocate(backend, dtype);

  const std::int64_t rows = micro_batch * seq, local = tp.local_rows(rows);
  for (auto& block : blocks_) block->allocate_activations(slots, micro_batch, seq);
  head_.allocate(slots, rows);
  residual_.assign(slots, {});
  for (auto& stream : residual_)
    residual_storage_.push_back(carve(backend, MemoryKind::activations, [&](Carver& c) {
      stream.clear();
      for (int i = 0; i <= config.n_layer; ++i)
        stream.push_back(c.take(dtype, {local, config.d_model}));
    }));
  workspace_storage_ = carve(backend, MemoryKind::workspace, [&](Carver& c) {
    TransformerBlock::layout_workspace(c, ctx_, config, rows, workspace_);
    d_residual_ = c.take(dtype, {local, config.d_model});
  });
}

void GptModel::forward_blocks(const std::int32_t* tokens, int slot) {
  const TensorParallel& tp = ctx_.tp;
  const std::int64_t rows = batch_ * seq_;
  auto& x = residual_[slot];
  // Vocabulary-parallel lookup: each rank contributes the rows of the ids it owns.
  const Tensor partial = tp.sequence_parallel() ? workspace_.full : x[0];
  embedding_.lookup(tokens, partial);
  tp.leave(partial, x[0]);
  embedding_.add_positions(x[0], seq_, tp.first_row(rows));
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->forward(slot, x[i], x[i + 1], workspace_);
}

double GptModel::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                  double grad_scale, int slot, bool last_micro_batch) {
  forward_blocks(tokens, slot);
  auto& x = residual_[slot];
  const double loss = head_.forward_backward(slot, x.back(), targets, grad_scale);
  head_.backward(slot, x.back(), d_residual_);
  grads_final(last_micro_batch, head_first_param_);
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i]->backward(slot, x[i], d_residual_, workspace_);
    grads_final(last_micro_batch, block_first_param_[i]);
  }
  const TensorParallel& tp = ctx_.tp;
  embedding_.backward_positions(d_residual_, seq_, tp.first_row(batch_ * seq_));
  const Tensor d_full = tp.sequence_parallel() ? workspace_.full : d_residual_;
  tp.leave_backward(d_residual_, d_full);
  embedding_.backward_lookup(tokens, d_full);
  grads_final(last_micro_batch, 0);
  return loss;
}

double GptModel::forward_loss(const std::int32_t* tokens, const std::int32_t* targets, int slot) {
  forward_blocks(tokens, slot);
  return head_.forward_loss(slot, residual_[slot].back(), targets);
}

void GptModel::next_token_logits(const std::int32_t* tokens, std::int64_t position, float* out) {
  forward_blocks(tokens, 0);
  head_.logits(0, residual_[0].back(), position, out);
}

}  // namespace kintsugi
