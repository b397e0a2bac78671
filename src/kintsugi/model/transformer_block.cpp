#include "kintsugi/model/transformer_block.hpp"

#include <cmath>
#include <string>

namespace kintsugi {

TransformerBlock::TransformerBlock(LayerContext& ctx, const ModelConfig& c, int index)
    : ctx_(ctx),
      d_(c.d_model),
      d_ff_(c.d_ff),
      heads_(c.n_head),
      ln1_(ctx, "blocks." + std::to_string(index) + ".ln1", c.d_model, c.norm_eps),
      // qkv rows are ordered per head (q, k, v of head 0, then head 1, ...): see AttentionShape.
      qkv_(ctx, "blocks." + std::to_string(index) + ".attn.qkv", c.d_model, 3 * c.d_model, true,
           c.init_std),
      // Residual projections start smaller, scaled by 1/sqrt(2 * layers) (GPT-2).
      proj_(ctx, "blocks." + std::to_string(index) + ".attn.proj", c.d_model, c.d_model, true,
            c.init_std / std::sqrt(2.0 * c.n_layer)),
      ln2_(ctx, "blocks." + std::to_string(index) + ".ln2", c.d_model, c.norm_eps),
      fc_(ctx, "blocks." + std::to_string(index) + ".mlp.fc", c.d_model, c.d_ff, true,
          c.init_std),
      fc2_(ctx, "blocks." + std::to_string(index) + ".mlp.fc2", c.d_ff, c.d_model, true,
           c.init_std / std::sqrt(2.0 * c.n_layer)) {}

void TransformerBlock::allocate_activations(int slots, std::int64_t batch, std::int64_t seq) {
  shape_ = {.batch = batch, .seq = seq, .heads = heads_, .kv_heads = heads_,
            .head_dim = d_ / heads_};
  const std::int64_t rows = batch * seq;
  const DType dt = ctx_.dtype;
  saved_.assign(slots, {});
  storage_.clear();
  for (Saved& s : saved_) {
    storage_.push_back(carve(ctx_.backend, MemoryKind::activations, [&](Carver& c) {
      s.ln1 = c.take(dt, {rows, d_});
      s.ln1_mean = c.take(dt, {rows});
      s.ln1_rstd = c.take(dt, {rows});
      s.qkv = c.take(dt, {rows, 3 * d_});
      s.attn = c.take(dt, {rows, d_});
      s.lse = c.take(dt, {batch, heads_, seq});
      s.mid = c.take(dt, {rows, d_});
      s.ln2 = c.take(dt, {rows, d_});
      s.ln2_mean = c.take(dt, {rows});
      s.ln2_rstd = c.take(dt, {rows});
      s.fc = c.take(dt, {rows, d_ff_});
      s.act = c.take(dt, {rows, d_ff_});
    }));
  }
}

void TransformerBlock::layout_workspace(Carver& c, DType dt, const ModelConfig& config,
                                        std::int64_t rows, BlockWorkspace& ws) {
  ws.d_norm = c.take(dt, {rows, config.d_model});
  ws.d_qkv = c.take(dt, {rows, 3 * config.d_model});
  ws.d_attn = c.take(dt, {rows, config.d_model});
  ws.d_fc = c.take(dt, {rows, config.d_ff});
}

void TransformerBlock::forward(int slot, const Tensor& x, const Tensor& y) {
  Saved& s = saved_[slot];
  Backend& be = ctx_.backend;
  ln1_.forward(x, s.ln1, s.ln1_mean, s.ln1_rstd);
  qkv_.forward(s.ln1, s.qkv);
  be.attention_forward(shape_, s.qkv, s.attn, s.lse);
  proj_.forward(s.attn, s.mid);
  be.add(x, s.mid, s.mid);
  ln2_.forward(s.mid, s.ln2, s.ln2_mean, s.ln2_rstd);
  fc_.forward(s.ln2, s.fc);
  be.gelu_forward(s.fc, s.act);
  fc2_.forward(s.act, y);
  be.add(s.mid, y, y);
}

void TransformerBlock::backward(int slot, const Tensor& x, const Tensor& d_residual,
                                const BlockWorkspace& ws) {
  Saved& s = saved_[slot];
  Backend& be = ctx_.backend;
  // MLP half: d_residual holds dL/dy, which is also dL/dmid through the skip connection.
  fc2_.backward(d_residual, s.act, &ws.d_fc, false);
  be.gelu_backward(s.fc, ws.d_fc, ws.d_fc);
  fc_.backward(ws.d_fc, s.ln2, &ws.d_norm, false);
  ln2_.backward(ws.d_norm, s.mid, s.ln2_mean, s.ln2_rstd, d_residual);
  // Attention half: d_residual now holds dL/dmid.
  proj_.backward(d_residual, s.attn, &ws.d_attn, false);
  be.attention_backward(shape_, s.qkv, s.attn, s.lse, ws.d_attn, ws.d_qkv);
  qkv_.backward(ws.d_qkv, s.ln1, &ws.d_norm, false);
  ln1_.backward(ws.d_norm, x, s.ln1_mean, s.ln1_rstd, d_residual);
}

}  // namespace kintsugi
