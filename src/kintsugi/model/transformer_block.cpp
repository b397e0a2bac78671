#include "kintsugi/model/transformer_block.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {
std::string prefix(int index) { return "blocks." + std::to_string(index); }

// Rows of the packed qkv weight: every query head plus a key and a value per kv head.
std::int64_t qkv_width(const ModelConfig& c) { return (c.n_head + 2 * c.kv_heads()) * c.head_dim(); }
}  // namespace

TransformerBlock::TransformerBlock(LayerContext& ctx, const ModelConfig& c, int index)
    : ctx_(ctx), config_(c), ln1_(ctx, prefix(index) + ".ln1", c.d_model, c.norm_eps, c.rms_norm()) {
  using Role = GridLinear::Role;
  // Registration order: ln1, qkv, proj, ln2, fc (gate), up, fc2 (down).
  const std::string p = prefix(index);
  const std::string fc = p + (c.gated_mlp() ? ".mlp.gate" : ".mlp.fc");
  const std::string fc2 = p + (c.gated_mlp() ? ".mlp.down" : ".mlp.fc2");
  // Residual projections start smaller, scaled by 1/sqrt(2 * layers) (GPT-2).
  const double residual_std = c.init_std / std::sqrt(2.0 * c.n_layer);
  const bool b = c.has_biases();
  if (ctx.grid) {
    // Entry layers split their input over x and output (whole heads, MLP columns) over y; exit
    // layers the converse (model/grid_linear.hpp).
    grid_qkv_.emplace(ctx, p + ".attn.qkv", c.d_model, qkv_width(c), Role::entry, c.init_std, b);
    grid_proj_.emplace(ctx, p + ".attn.proj", c.d_model, c.d_model, Role::exit, residual_std, b);
  } else {
    // qkv rows are grouped per kv head (its query heads, its key, its value; see
    // AttentionShape), so a column split hands each rank whole groups as long as tp divides the
    // kv heads (checked by validate(RunConfig)).
    qkv_.emplace(ctx, p + ".attn.qkv", c.d_model, qkv_width(c), Linear::Split::column,
                 c.init_std, b);
    proj_.emplace(ctx, p + ".attn.proj", c.d_model, c.d_model, Linear::Split::row, residual_std,
                  b);
  }
  ln2_.emplace(ctx, p + ".ln2", c.d_model, c.norm_eps, c.rms_norm());
  if (ctx.grid) {
    // SwiGLU's gate and up are both entry layers: matching columns on each y rank.
    grid_fc_.emplace(ctx, fc, c.d_model, c.d_ff, Role::entry, c.init_std, b);
    if (c.gated_mlp())
      grid_up_.emplace(ctx, p + ".mlp.up", c.d_model, c.d_ff, Role::entry, c.init_std, b);
    grid_fc2_.emplace(ctx, fc2, c.d_ff, c.d_model, Role::exit, residual_std, b);
    return;
  }
  // SwiGLU's gate and up projections are both column-parallel with the same split, so each
  // rank holds matching gate and up columns and multiplies them without communication.
  fc_.emplace(ctx, fc, c.d_model, c.d_ff, Linear::Split::column, c.init_std, b);
  if (c.gated_mlp())
    up_ = std::make_unique<Linear>(ctx, p + ".mlp.up", c.d_model, c.d_ff, Linear::Split::column,
                                   c.init_std, b);
  fc2_.emplace(ctx, fc2, c.d_ff, c.d_model, Linear::Split::row, residual_std, b);
}

namespace {

// Carves one micro-batch of a block's activations: each tensor kept here, or (keep false) the
// view into `shared` instead, recomputed in backward (no tensor without `shared`).
void layout(Carver& c, const LayerContext& ctx, const ModelConfig& m, std::int64_t batch,
            std::int64_t seq, BlockActivations& a, bool keep_attention, bool keep_rest,
            const BlockActivations* shared) {
  const TensorParallel& tp = ctx.tp;
  const DType dt = ctx.dtype;
  const std::int64_t d = m.d_model, rows = batch * seq, local = tp.local_rows(rows);
  // Heads and MLP columns are split over tp, or over the grid's y (3D).
  const int t = ctx.head_split();
  const std::int64_t d_attn = d / t, ff = m.d_ff / t, h = m.n_head / t;
  const bool layer_norm = !m.rms_norm();
  auto take = [&](bool keep, Tensor BlockActivations::*field, Shape shape, DType type) {
    a.*field = keep ? c.take(type, shape) : shared ? shared->*field : Tensor{};
  };
  const DType st = ctx.statistics();
  take(keep_rest, &BlockActivations::ln1, {local, d}, dt);
  take(keep_rest && layer_norm, &BlockActivations::ln1_mean, {local}, st);
  take(keep_rest, &BlockActivations::ln1_rstd, {local}, st);
  take(keep_rest, &BlockActivations::qkv, {rows, qkv_width(m) / t}, dt);
  take(keep_attention, &BlockActivations::attn, {rows, d_attn}, dt);
  take(keep_attention, &BlockActivations::lse, {batch, h, seq}, st);
  take(keep_rest, &BlockActivations::mid, {local, d}, dt);
  take(keep_rest, &BlockActivations::ln2, {local, d}, dt);
  take(keep_rest && layer_norm, &BlockActivations::ln2_mean, {local}, st);
  take(keep_rest, &BlockActivations::ln2_rstd, {local}, st);
  take(keep_rest, &BlockActivations::fc, {rows, ff}, dt);
  take(keep_rest && m.gated_mlp(), &BlockActivations::up, {rows, ff}, dt);
  take(keep_rest, &BlockActivations::act, {rows, ff}, dt);
}

}  // namespace

void TransformerBlock::allocate_activations(ActivationPool& pool, const std::string& segment,
                                            std::int64_t batch, std::int64_t seq,
                                            Recompute recompute, const BlockWorkspace& ws) {
  const int t = ctx_.head_split();
  const std::int64_t heads = config_.n_head / t;
  shape_ = {.batch = batch, .seq = seq, .heads = heads,
            .kv_heads = config_.kv_heads() / t, .head_dim = config_.head_dim()};
  // ALiBi: rank r holds global heads [r * heads, (r + 1) * heads) and uses their slopes.
  if (config_.is_bloom()) {
    shape_.alibi_heads = config_.n_head;
    shape_.head_begin = ctx_.head_rank() * heads;
  }
  recompute_ = recompute;
  saved_.assign(pool.slots(), {});
  for (int k = 0; k < pool.slots(); ++k)
    pool.carve(k, segment, [&](Carver& c) {
      layout(c, ctx_, config_, batch, seq, saved_[k], recompute == Recompute::none,
             recompute != Recompute::full, &ws.recomputed);
    });
}

void TransformerBlock::set_documents(int slot, const Tensor& doc_start) {
  KINTSUGI_ASSERT(doc_start.dtype == DType::i32 && doc_start.numel() == shape_.batch * shape_.seq);
  doc_start_.resize(saved_.size(), nullptr);
  doc_start_[slot] = static_cast<const std::int32_t*>(doc_start.data);
}

void TransformerBlock::layout_workspace(Carver& c, const LayerContext& ctx,
                                        const ModelConfig& config, std::int64_t batch,
                                        std::int64_t seq, Recompute recompute,
                                        BlockWorkspace& ws) {
  const TensorParallel& tp = ctx.tp;
  const DType dt = ctx.dtype;
  const std::int64_t d = config.d_model, rows = batch * seq;
  ws.full = tp.sequence_parallel() ? c.take(dt, {rows, d}) : Tensor{};
  ws.norm_full = tp.sequence_parallel() ? c.take(dt, {rows, d}) : Tensor{};
  ws.d_norm_full = c.take(dt, {rows, d});
  ws.d_norm = tp.sequence_parallel() ? c.take(dt, {tp.local_rows(rows), d}) : ws.d_norm_full;
  const int t = ctx.head_split();
  ws.d_qkv = c.take(dt, {rows, qkv_width(config) / t});
  ws.d_attn = c.take(dt, {rows, d / t});
  ws.d_fc = c.take(dt, {rows, config.d_ff / t});
  ws.d_up = config.gated_mlp() ? c.take(dt, {rows, config.d_ff / t}) : Tensor{};
  if (ctx.grid) {
    using Role = GridLinear::Role;
    const TensorGrid& g = *ctx.grid;
    const std::int64_t gx = g.shape().x, gz = g.shape().z;
    // The largest block of the four layers, gathered over z, and its gradient.
    std::int64_t block = 0;
    for (auto [in, out, role] : {std::tuple{d, qkv_width(config), Role::entry},
                                 std::tuple{d, d, Role::exit},
                                 std::tuple{d, config.d_ff, Role::entry},
                                 std::tuple{config.d_ff, d, Role::exit}})
      block = std::max(block, GridLinear::block_elements(g, in, out, role));
    const DType gt = ctx.params.grad_dtype();
    GridWorkspace& gw = ws.grid;
    // Overlap keeps a second copy of each: one layer's block computes while the next one's is
    // gathered, and one layer's gradient is reduce-scattered while the next one's is computed.
    const int copies = gz == 1 ? 0 : ctx.grid_overlap ? 2 : 1;
    for (int k = 0; k < copies; ++k) {
      gw.weight[k] = c.take(dt, {block});
      gw.dweight[k] = c.take(gt, {block});
      gw.dshard[k] = c.take(gt, {block / gz});
      gw.dbias[k] = c.take(gt, {std::max(qkv_width(config), config.d_ff)});
    }
    gw.d_act = c.take(dt, {rows, config.d_ff / t});
    if (gx > 1) {
      gw.in = c.take(dt, {rows, d / gx});
      gw.d_in = c.take(dt, {rows, d / gx});
      gw.out = c.take(dt, {rows, d / gx});
      gw.d_out = c.take(dt, {rows, d / gx});
      gw.gathered = c.take(dt, {rows, d});
      gw.slice_index = c.take(DType::i32, {rows});
      gw.interleave_index = c.take(DType::i32, {rows * gx});
    }
  }
  // One micro-batch of whatever is recomputed, shared by all blocks (one runs at a time).
  if (recompute != Recompute::none)
    layout(c, ctx, config, batch, seq, ws.recomputed, true, recompute == Recompute::full,
           nullptr);
  if (recompute == Recompute::full) ws.recomputed_output = c.take(dt, {tp.local_rows(rows), d});
}

void TransformerBlock::fill_workspace(const LayerContext& ctx, std::int64_t rows,
                                      const BlockWorkspace& ws) {
  if (ctx.grid) GridColumns(ctx.backend, *ctx.grid).write_indices(rows, ws.grid);
}

const Tensor& TransformerBlock::full_rows(const Tensor& local, const BlockWorkspace& ws) const {
  return ctx_.tp.sequence_parallel() ? ws.norm_full : local;
}

void TransformerBlock::forward(int slot, const Tensor& x, const Tensor& y,
                               const BlockWorkspace& ws) {
  if (ctx_.grid) return forward_grid(slot, x, y, ws);
  BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  const TensorParallel& tp = ctx_.tp;
  const bool sp = tp.sequence_parallel();
  // Attention half.
  ln1_.forward(x, s.ln1, s.ln1_mean, s.ln1_rstd);
  tp.enter(s.ln1, full_rows(s.ln1, ws));
  qkv_->forward(full_rows(s.ln1, ws), s.qkv);
  // Rotated in place: attention (and its selective recomputation) reads rotated queries and
  // keys, and backward rotates their gradient back.
  const AttentionShape shape = this->shape(slot);
  if (config_.is_llama()) be.rope(shape, s.qkv, config_.rope_theta, false);
  be.attention_forward(shape, s.qkv, s.attn, s.lse);
  const Tensor attn_out = sp ? ws.full : s.mid;
  proj_->forward(s.attn, attn_out);
  tp.leave(attn_out, s.mid);
  proj_->add_bias(s.mid);
  be.add(x, s.mid, s.mid);
  // MLP half.
  ln2_->forward(s.mid, s.ln2, s.ln2_mean, s.ln2_rstd);
  const Tensor& ln2_full = full_rows(s.ln2, ws);
  tp.enter(s.ln2, ln2_full);
  if (up_) {
    fc_->forward(ln2_full, s.fc);
    up_->forward(ln2_full, s.up);
    be.swiglu_forward(s.fc, s.up, s.act);
  } else {
    fc_->forward_gelu(ln2_full, s.fc, s.act);
  }
  const Tensor mlp_out = sp ? ws.full : y;
  fc2_->forward(s.act, mlp_out);
  tp.leave(mlp_out, y);
  fc2_->add_bias(y);
  be.add(s.mid, y, y);
}

void TransformerBlock::extend(int slot, const Tensor& x, const Tensor& y, std::int64_t first,
                              std::int64_t count) {
  KINTSUGI_ASSERT(ctx_.tp.size() == 1 && shape_.batch == 1 && recompute_ == Recompute::none &&
                  doc_start_.empty());
  KINTSUGI_ASSERT(first >= 0 && count >= 1 && first + count <= shape_.seq);
  BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  auto rows = [first, count](const Tensor& t) { return t.empty() ? t : t.rows(first, count); };
  const Tensor ln1 = rows(s.ln1), qkv = rows(s.qkv), attn = rows(s.attn), mid = rows(s.mid);
  ln1_.forward(rows(x), ln1, rows(s.ln1_mean), rows(s.ln1_rstd));
  qkv_->forward(ln1, qkv);  // the new rows of the cache
  AttentionShape part = shape_;
  part.seq = count;
  part.first_position = first;
  if (config_.is_llama()) be.rope(part, qkv, config_.rope_theta, false);
  if (first == 0) {
    // A prompt: causal attention among its own rows, as forward would run a window of `count`
    // (batch 1: its log-sum-exp is the first heads x count values of the saved one).
    const Tensor lse = s.lse.reshaped({s.lse.numel()}).rows(0, shape_.heads * count);
    be.attention_forward(part, qkv, attn, lse.reshaped({1, shape_.heads, count}));
  } else {
    for (std::int64_t r = 0; r < count; ++r)
      be.attention_decode(shape_, s.qkv, first + r, attn.rows(r, 1));
  }
  proj_->forward(attn, mid);
  proj_->add_bias(mid);
  be.add(rows(x), mid, mid);
  const Tensor ln2 = rows(s.ln2), fc = rows(s.fc), act = rows(s.act), out = rows(y);
  ln2_->forward(mid, ln2, rows(s.ln2_mean), rows(s.ln2_rstd));
  if (up_) {
    fc_->forward(ln2, fc);
    up_->forward(ln2, rows(s.up));
    be.swiglu_forward(fc, rows(s.up), act);
  } else {
    fc_->forward_gelu(ln2, fc, act);
  }
  fc2_->forward(act, out);
  fc2_->add_bias(out);
  be.add(mid, out, out);
}

void TransformerBlock::backward(int slot, const Tensor& x, const Tensor& d_residual,
                                const BlockWorkspace& ws) {
  BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  const TensorParallel& tp = ctx_.tp;
  // Recompute what forward did not keep: the same kernels on the same inputs give the same
  // values, so training is bit-identical to keeping them.
  if (recompute_ == Recompute::full) forward(slot, x, ws.recomputed_output, ws);
  const AttentionShape shape = this->shape(slot);
  if (recompute_ == Recompute::selective) be.attention_forward(shape, s.qkv, s.attn, s.lse);
  if (ctx_.grid) return backward_grid(slot, x, d_residual, ws);
  const bool sp = tp.sequence_parallel();
  const Tensor dy_full = sp ? ws.full : d_residual;
  // Sequence parallelism: the norm outputs' other rows are gathered again, each while the
  // gradients before its use are computed.
  const Tensor& ln2_full = full_rows(s.ln2, ws);
  const Tensor& ln1_full = full_rows(s.ln1, ws);
  // MLP half: d_residual holds dL/dy, which is also dL/dmid through the skip connection.
  tp.leave_backward(d_residual, dy_full);
  CommHandle gather = sp ? tp.regather_async(s.ln2, ln2_full) : CommHandle{};
  if (up_) {
    fc2_->backward(dy_full, s.act, &ws.d_fc, false);
    be.swiglu_backward(s.fc, s.up, ws.d_fc, ws.d_fc, ws.d_up);
    gather.wait();
    fc_->backward(ws.d_fc, ln2_full, &ws.d_norm_full, false);
    up_->backward(ws.d_up, ln2_full, &ws.d_norm_full, true);
  } else {
    fc2_->backward_gelu(dy_full, s.act, s.fc, ws.d_fc);  // d_fc: through the GELU already
    gather.wait();
    fc_->backward(ws.d_fc, ln2_full, &ws.d_norm_full, false);
  }
  tp.enter_backward(ws.d_norm_full, ws.d_norm);
  ln2_->backward(ws.d_norm, s.mid, s.ln2_mean, s.ln2_rstd, d_residual);
  // Attention half: d_residual now holds dL/dmid.
  tp.leave_backward(d_residual, dy_full);
  if (sp) gather = tp.regather_async(s.ln1, ln1_full);
  proj_->backward(dy_full, s.attn, &ws.d_attn, false);
  be.attention_backward(shape, s.qkv, s.attn, s.lse, ws.d_attn, ws.d_qkv);
  if (config_.is_llama()) be.rope(shape, ws.d_qkv, config_.rope_theta, true);
  gather.wait();
  qkv_->backward(ws.d_qkv, ln1_full, &ws.d_norm_full, false);
  tp.enter_backward(ws.d_norm_full, ws.d_norm);
  ln1_.backward(ws.d_norm, x, s.ln1_mean, s.ln1_rstd, d_residual);
}

// 3D tensor parallelism: the residual stream, the norms and their outputs hold whole rows of
// this z's token rows; entry layers read the x-rank's slice of the columns, exit layers write
// it, and it is gathered back over x (model/grid_linear.hpp, docs/parallelism.md).
void TransformerBlock::forward_grid(int slot, const Tensor& x, const Tensor& y,
                                    const BlockWorkspace& ws) {
  BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  const GridWorkspace& g = ws.grid;
  const GridColumns cols(be, *ctx_.grid);
  auto slice = [&](const Tensor& full) {  // this x's columns of a whole-row tensor
    if (cols.whole()) return full;
    cols.slice(full, g.in, g);
    return g.in;
  };
  // Attention half: qkv's output holds this y's heads, replicated over x.
  ln1_.forward(x, s.ln1, s.ln1_mean, s.ln1_rstd);
  grid_qkv_->forward(slice(s.ln1), s.qkv, g, &*grid_proj_);
  const AttentionShape shape = this->shape(slot);
  if (config_.is_llama()) be.rope(shape, s.qkv, config_.rope_theta, false);
  be.attention_forward(shape, s.qkv, s.attn, s.lse);
  const Tensor attn_out = cols.whole() ? s.mid : g.out;
  grid_proj_->forward(s.attn, attn_out, g, &*grid_fc_);
  cols.gather(attn_out, s.mid, g);
  be.add(x, s.mid, s.mid);
  // MLP half: fc's output holds this y's columns; the GELU (SwiGLU) runs on them where they are.
  ln2_->forward(s.mid, s.ln2, s.ln2_mean, s.ln2_rstd);
  const Tensor in2 = slice(s.ln2);
  grid_fc_->forward(in2, s.fc, g, grid_up_ ? &*grid_up_ : &*grid_fc2_);
  if (grid_up_) {
    grid_up_->forward(in2, s.up, g, &*grid_fc2_);
    be.swiglu_forward(s.fc, s.up, s.act);
  } else {
    be.gelu_forward(s.fc, s.act);
  }
  const Tensor mlp_out = cols.whole() ? y : g.out;
  grid_fc2_->forward(s.act, mlp_out, g);
  cols.gather(mlp_out, y, g);
  be.add(s.mid, y, y);
}

void TransformerBlock::backward_grid(int slot, const Tensor& x, const Tensor& d_residual,
                                     const BlockWorkspace& ws) {
  BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  const GridWorkspace& g = ws.grid;
  const GridColumns cols(be, *ctx_.grid);
  auto slice = [&](const Tensor& full, const Tensor& part) {
    if (cols.whole()) return full;
    cols.slice(full, part, g);
    return part;
  };
  // An entry layer's input gradient, reduced over y, gathered over x into whole rows.
  const Tensor d_in = cols.whole() ? ws.d_norm_full : g.d_in;
  const AttentionShape shape = this->shape(slot);
  // MLP half: d_residual holds dL/dy, which is also dL/dmid through the skip connection.
  grid_fc2_->backward(slice(d_residual, g.d_out), s.act, &g.d_act, g, false, true, &*grid_fc_);
  const Tensor in2 = slice(s.ln2, g.in);
  if (grid_up_) {
    // The input gradient of gate and up, summed before its one reduction over y.
    be.swiglu_backward(s.fc, s.up, g.d_act, ws.d_fc, ws.d_up);
    grid_fc_->backward(ws.d_fc, in2, &d_in, g, false, false, &*grid_up_);
    grid_up_->backward(ws.d_up, in2, &d_in, g, true, true, &*grid_proj_);
  } else {
    be.gelu_backward(s.fc, g.d_act, ws.d_fc);
    grid_fc_->backward(ws.d_fc, in2, &d_in, g, false, true, &*grid_proj_);
  }
  cols.gather(d_in, ws.d_norm_full, g);
  ln2_->backward(ws.d_norm_full, s.mid, s.ln2_mean, s.ln2_rstd, d_residual);
  // Attention half: d_residual now holds dL/dmid.
  grid_proj_->backward(slice(d_residual, g.d_out), s.attn, &ws.d_attn, g, false, true,
                      &*grid_qkv_);
  be.attention_backward(shape, s.qkv, s.attn, s.lse, ws.d_attn, ws.d_qkv);
  if (config_.is_llama()) be.rope(shape, ws.d_qkv, config_.rope_theta, true);
  grid_qkv_->backward(ws.d_qkv, slice(s.ln1, g.in), &d_in, g);
  cols.gather(d_in, ws.d_norm_full, g);
  ln1_.backward(ws.d_norm_full, x, s.ln1_mean, s.ln1_rstd, d_residual);
  // The last weight-gradient reduce-scatters ran on while the x gather and the norm computed;
  // the block's gradients are final once they end (model/grid_linear.hpp).
  GridLinear::flush(ctx_, g);
}

}  // namespace kintsugi
