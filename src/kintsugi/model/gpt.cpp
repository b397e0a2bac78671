#include "kintsugi/model/gpt.hpp"

namespace kintsugi {

namespace {
std::vector<std::unique_ptr<TransformerBlock>> make_blocks(LayerContext& ctx,
                                                           const ModelConfig& config) {
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  for (int i = 0; i < config.n_layer; ++i)
    blocks.push_back(std::make_unique<TransformerBlock>(ctx, config, i));
  return blocks;
}
}  // namespace

GptModel::GptModel(Backend& backend, const ModelConfig& config, DType dtype,
                   std::int64_t micro_batch, std::int64_t seq, int slots)
    : config_((validate(config), config)),
      batch_(micro_batch),
      seq_(seq),
      ctx_{backend, params_, dtype},
      embedding_(ctx_, config.vocab_size, config.padded_vocab(), config.seq_len, config.d_model,
                 config.init_std),
      blocks_(make_blocks(ctx_, config)),
      head_(ctx_, config, embedding_.token_param()) {
  KINTSUGI_ASSERT(seq > 0 && seq <= config.seq_len && micro_batch > 0 && slots > 0);
  params_.allocate(backend, dtype);

  const std::int64_t rows = micro_batch * seq;
  for (auto& block : blocks_) block->allocate_activations(slots, micro_batch, seq);
  head_.allocate(slots, rows);
  residual_.assign(slots, {});
  for (auto& stream : residual_)
    residual_storage_.push_back(carve(backend, MemoryKind::activations, [&](Carver& c) {
      stream.clear();
      for (int i = 0; i <= config.n_layer; ++i)
        stream.push_back(c.take(dtype, {rows, config.d_model}));
    }));
  workspace_storage_ = carve(backend, MemoryKind::workspace, [&](Carver& c) {
    TransformerBlock::layout_workspace(c, dtype, config, rows, workspace_);
    d_residual_ = c.take(dtype, {rows, config.d_model});
  });
}

void GptModel::forward_blocks(const std::int32_t* tokens, int slot) {
  auto& x = residual_[slot];
  embedding_.forward(tokens, seq_, x[0]);
  for (std::size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->forward(slot, x[i], x[i + 1]);
}

double GptModel::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                  double grad_scale, int slot) {
  forward_blocks(tokens, slot);
  auto& x = residual_[slot];
  const double loss = head_.forward_backward(slot, x.back(), targets, grad_scale);
  head_.backward(slot, x.back(), d_residual_);
  for (std::size_t i = blocks_.size(); i-- > 0;)
    blocks_[i]->backward(slot, x[i], d_residual_, workspace_);
  embedding_.backward(tokens, seq_, d_residual_);
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
