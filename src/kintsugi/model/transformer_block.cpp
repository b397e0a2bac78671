#include "kintsugi/model/transformer_block.hpp"

#include <cmath>
#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {
std::string prefix(int index) { return "blocks." + std::to_string(index); }
}  // namespace

// Registration order: ln1, qkv, proj, ln2, fc (gate), up, fc2 (down).
TransformerBlock::TransformerBlock(LayerContext& ctx, const ModelConfig& c, int index,
                                   MoeLossWeights moe_weights)
    : ctx_(ctx), config_(c), index_(index), rotary_(c.uses_rope() ? rotary_table(c) : RotaryTable{}), ln1_(ctx, prefix(index) + ".ln1", c.d_model, c.norm_eps, c.rms_norm()) {
  const BlockInventory inventory = block_inventory(c, index, ctx.expert_ranks(), ctx.cp.size());
  const auto& halves = inventory.halves;
  attention_ = make_block_half(ctx, halves[0], nullptr);
  if (c.qk_norm()) {
    // Replicated: every rank normalizes its own heads with the same weights.
    auto norm = [&](const char* name) {
      return ctx.params.add({.name = prefix(index) + ".attn." + name + ".weight",
                             .global_shape = {c.head_dim()}, .init = ParamInit::ones,
                             .head_partial_grad = true});
    };
    q_norm_ = norm("q_norm");
    k_norm_ = norm("k_norm");
  }
  ln2_.emplace(ctx, prefix(index) + ".ln2", c.d_model, c.norm_eps, c.rms_norm());
  if (inventory.moe)
    moe_ = std::make_unique<MoeLayer>(ctx, *inventory.moe, moe_weights);
  else
    mlp_ = make_block_half(ctx, halves[1], attention_.get());
}

namespace {

// Carves one micro-batch of a block's saved tensors: those `keep` says, the others views of
// `shared` (empty without it).
template <class Keep>
void layout(Carver& c, const LayerContext& ctx, const std::vector<SavedTensor>& saved,
            std::int64_t batch, std::int64_t seq, BlockActivations& a, Keep keep,
            const BlockActivations* shared) {
  // Heads and MLP columns are split over tp, or over the grid's y (3D).
  const std::int64_t local = ctx.tp.local_rows(batch * seq), split = ctx.head_split();
  for (const SavedTensor& t : saved) {
    if (!keep(t)) {
      a.*t.field = shared ? shared->*t.field : Tensor{};
      continue;
    }
    a.*t.field = c.take(t.index ? DType::i32 : t.statistic ? ctx.statistics() : ctx.dtype,
                        t.shape(batch, seq, local, split));
  }
}

}  // namespace

void TransformerBlock::allocate_activations(ActivationPool& pool, const std::string& segment,
                                            std::int64_t batch, std::int64_t seq,
                                            Recompute recompute, const BlockWorkspace& ws) {
  // Context parallelism: `seq` is this rank's rows of each sequence, and attention runs on
  // whole sequences of 1/cp of the heads (model/context_parallel.hpp).
  // The ring keeps every head of the rank's rows (ring_attention.cpp).
  const ContextParallel& cp = ctx_.cp;
  const int head_ranks = cp.ring() ? 1 : cp.size();
  const int t = ctx_.head_split() * head_ranks;
  const std::int64_t heads = config_.n_head / t;
  shape_ = {.batch = batch, .seq = seq * cp.size(), .heads = heads,
            .kv_heads = config_.kv_heads() / t, .head_dim = config_.head_dim()};
  shape_.window = config_.sliding_window;  // in the sequence's rows, so in absolute positions
  // ALiBi: rank r holds global heads [r * heads, (r + 1) * heads) and uses their slopes (with
  // the all-to-all r counts the cp ranks inside each tensor-parallel rank's heads).
  if (config_.uses_alibi()) {
    shape_.alibi_heads = config_.n_head;
    shape_.head_begin = (ctx_.head_rank() * head_ranks + (cp.ring() ? 0 : cp.rank())) * heads;
  }
  recompute_ = recompute;
  saved_.assign(pool.slots(), {});
  const std::vector<SavedTensor> saved = block_inventory(config_, index_, ctx_.expert_ranks(), ctx_.cp.size()).saved;
  for (int k = 0; k < pool.slots(); ++k)
    pool.carve(k, segment, [&](Carver& c) {
      layout(c, ctx_, saved, batch, seq, saved_[k],
             [&](const SavedTensor& t) { return t.kept(recompute); }, &ws.recomputed);
    });
}

void TransformerBlock::set_documents(int slot, const Tensor& doc_start) {
  KINTSUGI_ASSERT(doc_start.dtype == DType::i32 && doc_start.numel() == shape_.batch * shape_.seq);
  doc_start_.resize(saved_.size(), nullptr);
  doc_start_[slot] = static_cast<const std::int32_t*>(doc_start.data);
}

void TransformerBlock::set_rope_rows(int slot, const Tensor& rope_rows) {
  KINTSUGI_ASSERT(rope_rows.dtype == DType::i32 &&
                  rope_rows.numel() == shape_.batch * shape_.seq / ctx_.cp.size());
  rope_rows_.resize(saved_.size(), nullptr);
  rope_rows_[slot] = static_cast<const std::int32_t*>(rope_rows.data);
}

AttentionShape TransformerBlock::local_shape(int slot) const {
  AttentionShape s = shape(slot);
  s.seq /= ctx_.cp.size();
  s.doc_start = rope_rows_.empty() ? nullptr : rope_rows_[slot];
  return s;
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
  const BlockInventory inventory = block_inventory(config, 0, ctx.expert_ranks(), ctx.cp.size());
  ws.d_qkv = c.take(dt, {rows, inventory.halves[0].entries[0].out / t});
  ws.d_attn = c.take(dt, {rows, config.q_width() / t});
  ws.d_fc = c.take(dt, {rows, config.d_ff / t});
  ws.d_up = config.gated_mlp() ? c.take(dt, {rows, config.d_ff / t}) : Tensor{};
  if (ctx.cp.ring()) {
    // The key/value chunk attended and the one arriving, and their gradients' accumulators
    // (in the statistics type, as the f32 running state of a 16-bit run: ring_attention.cpp).
    const std::int64_t kv = 2 * config.kv_heads() / t * config.head_dim();
    for (Tensor* b : {&ws.cp_ring.kv[0], &ws.cp_ring.kv[1]}) *b = c.take(dt, {rows, kv});
    for (Tensor* b : {&ws.cp_ring.dkv[0], &ws.cp_ring.dkv[1]})
      *b = c.take(ctx.statistics(), {rows, kv});
    if (ctx.statistics() != dt) {
      const std::int64_t qkv = inventory.halves[0].entries[0].out / t, q = config.q_width() / t;
      ws.cp_ring.state = c.take(ctx.statistics(), {rows * std::max(qkv, q)});
    }
  } else if (ctx.cp.active()) {
    const std::int64_t qkv = inventory.halves[0].entries[0].out / t, q = config.q_width() / t;
    ws.cp_send = c.take(dt, {rows * std::max(qkv, q)});
    ws.cp_recv = c.take(dt, {rows * std::max(qkv, q)});
    ws.cp_out = c.take(dt, {rows, q});
    ws.cp_dout = c.take(dt, {rows, q});
    ws.cp_dqkv = c.take(dt, {rows, qkv});
  }
  layout_halves_workspace(c, ctx, inventory.halves, rows, ws);
  // The MoE blocks' workspace (a model with dense blocks too: the first MoE block's).
  if (const BlockInventory moe = first_moe_block_inventory(config, ctx.expert_ranks(), ctx.cp.size()); moe.moe)
    MoeLayer::layout_workspace(c, ctx, *moe.moe, rows, ws);
  // One micro-batch of whatever is recomputed, shared by all blocks (one runs at a time): of
  // either kind of block.
  if (recompute != Recompute::none)
    layout(c, ctx, saved_by_any_block(config, ctx.expert_ranks()), batch, seq, ws.recomputed,
           [&](const SavedTensor& t) { return !t.kept(recompute); }, nullptr);
  if (recompute == Recompute::full) ws.recomputed_output = c.take(dt, {tp.local_rows(rows), d});
}

void TransformerBlock::fill_workspace(const LayerContext& ctx, std::int64_t rows,
                                      const BlockWorkspace& ws) {
  fill_halves_workspace(ctx, rows, ws);
}

void TransformerBlock::forward(int slot, const Tensor& x, const Tensor& y,
                               const BlockWorkspace& ws) {
  forward_rows(slot, x, y, ws, RowRange{});
}

void TransformerBlock::extend(int slot, const Tensor& x, const Tensor& y, std::int64_t first,
                              std::int64_t count, const BlockWorkspace& ws) {
  KINTSUGI_ASSERT(ctx_.tp.size() == 1 && !ctx_.grid && shape_.batch == 1 &&
                  recompute_ == Recompute::none && doc_start_.empty());
  KINTSUGI_ASSERT(first >= 0 && count >= 1 && first + count <= shape_.seq);
  forward_rows(slot, x, y, ws, RowRange{first, count});
}

void TransformerBlock::forward_rows(int slot, const Tensor& x, const Tensor& y,
                                    const BlockWorkspace& ws, RowRange r) {
  const BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  // Attention half.
  const Tensor in = r.of(x), ln1 = r.of(s.ln1), attn = r.of(s.attn), mid = r.of(s.mid);
  ln1_.forward(in, ln1, r.of(s.ln1_mean), r.of(s.ln1_rstd));
  const ContextParallel& cp = ctx_.cp;
  // Context parallelism: this rank's rows of every head, exchanged for whole sequences of
  // 1/cp of the heads (which the saved qkv holds: as many elements), and back after attention
  // (forward's scratch is backward's gradient buffers, free until then).
  if (cp.active() && !cp.ring()) {
    attention_->entry(0, attention_->enter(ln1, ws), ws.d_qkv, ws);
    cp.to_heads(be, ws.d_qkv, s.qkv, shape_.batch, ws.cp_send, ws.cp_recv);
    attend(slot, r, ws.d_attn, ws);
    cp.to_rows(be, ws.d_attn, attn, shape_.batch, ws.cp_send, ws.cp_recv);
  } else {
    attention_->entry(0, attention_->enter(ln1, ws), r.of(s.qkv), ws);
    attend(slot, r, s.attn, ws);
  }
  attention_->exit(attn, mid, ws);
  be.add(in, mid, mid);
  // MLP half.
  const Tensor ln2 = r.of(s.ln2), fc = r.of(s.fc), act = r.of(s.act), out = r.of(y);
  ln2_->forward(mid, ln2, r.of(s.ln2_mean), r.of(s.ln2_rstd));
  if (moe_) {
    if (r.all())
      moe_->forward(slot, s, ln2, out, ws, !recomputing_);
    else
      moe_->forward_rows(slot, s, ln2, out, ws, r.first, r.count);
    return be.add(mid, out, out);
  }
  const Tensor entry_in = mlp_->enter(ln2, ws);
  if (config_.gated_mlp()) {
    const Tensor up = r.of(s.up);
    mlp_->entry(0, entry_in, fc, ws);
    mlp_->entry(1, entry_in, up, ws);
    be.swiglu_forward(fc, up, act);
  } else {
    mlp_->entry_gelu(entry_in, fc, act, ws);
  }
  mlp_->exit(act, out, ws);
  be.add(mid, out, out);
}

void TransformerBlock::attend(int slot, RowRange r, const Tensor& out, const BlockWorkspace& ws) {
  const BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  AttentionShape shape = this->shape(slot);
  if (!r.all()) {
    shape.seq = r.count;
    shape.first_position = r.first;
  }
  // Rotated in place: attention (and its selective recomputation) reads rotated queries and
  // keys, and backward rotates their gradient back.
  const Tensor qkv = r.of(s.qkv), attn = r.of(s.attn);
  if (ctx_.cp.ring()) {
    // This rank's rows, rotated at their positions, against every rank's keys and values.
    const AttentionShape local = local_shape(slot);
    if (config_.qk_norm()) {
      be.copy(s.qkv, s.qkv_pre);
      be.qk_norm_forward(local, s.qkv, ctx_.params.param(q_norm_), ctx_.params.param(k_norm_),
                         s.qk_rstd, config_.norm_eps);
    }
    if (config_.uses_rope()) be.rope(local, s.qkv, rotary_, false);
    return ctx_.cp.ring_forward(be, shape, s.qkv, out, s.lse, ws.cp_ring, ctx_.tracer);
  }
  if (config_.qk_norm()) {
    be.copy(qkv, r.of(s.qkv_pre));
    be.qk_norm_forward(shape, qkv, ctx_.params.param(q_norm_), ctx_.params.param(k_norm_),
                       r.of(s.qk_rstd), config_.norm_eps);
  }
  if (config_.uses_rope()) be.rope(shape, qkv, rotary_, false);
  if (r.all()) return be.attention_forward(shape, s.qkv, out, s.lse);
  if (r.first == 0) {
    // A prompt: causal attention among its own rows, as forward would run a window of `count`
    // (batch 1: its log-sum-exp is the first heads x count values of the saved one).
    const Tensor lse = s.lse.reshaped({s.lse.numel()}).rows(0, shape_.heads * r.count);
    return be.attention_forward(shape, qkv, attn, lse.reshaped({1, shape_.heads, r.count}));
  }
  for (std::int64_t k = 0; k < r.count; ++k)
    be.attention_decode(shape_, s.qkv, r.first + k, attn.rows(k, 1));
}

void TransformerBlock::backward(int slot, const Tensor& x, const Tensor& d_residual,
                                const BlockWorkspace& ws) {
  const BlockActivations& s = saved_[slot];
  Backend& be = ctx_.backend;
  const ContextParallel& cp = ctx_.cp;
  // Recompute what forward did not keep: the same kernels on the same inputs give the same
  // values, so training is bit-identical to keeping them.
  if (recompute_ == Recompute::full) {
    recomputing_ = true;
    forward(slot, x, ws.recomputed_output, ws);
    recomputing_ = false;
  }
  const AttentionShape shape = this->shape(slot);
  // Context parallelism: attention's output and gradient with every row and 1/cp of the heads
  // (forward kept only this rank's rows of it, which the projection's gradient reads).
  const bool exchange = cp.active() && !cp.ring();  // the all-to-all
  const Tensor out = exchange ? ws.cp_out : s.attn;
  if (recompute_ == Recompute::selective) {
    if (cp.ring()) {
      cp.ring_forward(be, shape, s.qkv, s.attn, s.lse, ws.cp_ring, ctx_.tracer);
    } else {
      be.attention_forward(shape, s.qkv, out, s.lse);
      if (exchange) cp.to_rows(be, out, s.attn, shape_.batch, ws.cp_send, ws.cp_recv);
    }
  } else if (exchange) {
    cp.to_heads(be, s.attn, out, shape_.batch, ws.cp_send, ws.cp_recv);
  }
  // MLP half: d_residual holds dL/dy, which is also dL/dmid through the skip connection.
  Tensor d_norm;
  if (moe_) {
    d_norm = moe_->backward(slot, s, s.ln2, d_residual, ws);
  } else if (config_.gated_mlp()) {
    const Tensor d_act = mlp_->exit_backward(d_residual, s.act, s.ln2, ws);
    be.swiglu_backward(s.fc, s.up, d_act, ws.d_fc, ws.d_up);
    const Tensor d_entries[] = {ws.d_fc, ws.d_up};
    d_norm = mlp_->entry_backward(s.ln2, d_entries, ws);
  } else {
    mlp_->exit_backward_gelu(d_residual, s.act, s.fc, ws.d_fc, s.ln2, ws);
    d_norm = mlp_->entry_backward(s.ln2, {&ws.d_fc, 1}, ws);
  }
  ln2_->backward(d_norm, s.mid, s.ln2_mean, s.ln2_rstd, d_residual);
  // Attention half: d_residual now holds dL/dmid.
  Tensor d_attn = attention_->exit_backward(d_residual, s.attn, s.ln1, ws);
  if (cp.ring()) {
    cp.ring_backward(be, shape, s.qkv, s.attn, s.lse, d_attn, ws.d_qkv, ws.cp_ring,
                     ctx_.tracer);
    const AttentionShape local = local_shape(slot);
    if (config_.uses_rope()) be.rope(local, ws.d_qkv, rotary_, true);
    if (config_.qk_norm()) qk_norm_backward(s, local, ws.d_qkv);
  } else {
    const Tensor d_qkv = exchange ? ws.cp_dqkv : ws.d_qkv;
    if (exchange) {
      cp.to_heads(be, d_attn, ws.cp_dout, shape_.batch, ws.cp_send, ws.cp_recv);
      d_attn = ws.cp_dout;
    }
    be.attention_backward(shape, s.qkv, out, s.lse, d_attn, d_qkv);
    if (config_.uses_rope()) be.rope(shape, d_qkv, rotary_, true);
    if (config_.qk_norm()) qk_norm_backward(s, shape, d_qkv);
    if (exchange) cp.to_rows(be, d_qkv, ws.d_qkv, shape_.batch, ws.cp_send, ws.cp_recv);
  }
  d_norm = attention_->entry_backward(s.ln1, {&ws.d_qkv, 1}, ws);
  ln1_.backward(d_norm, x, s.ln1_mean, s.ln1_rstd, d_residual);
  attention_->finish_backward(ws);
}

void TransformerBlock::qk_norm_backward(const BlockActivations& s, const AttentionShape& shape,
                                        const Tensor& d_qkv) {
  Backend& be = ctx_.backend;
  ParamStore& p = ctx_.params;
  // The op accumulates into the weights' gradients: zero them where this is the first write.
  for (int i : {q_norm_, k_norm_})
    if (!p.accumulate_grad(i)) be.zero(p.grad(i));
  be.qk_norm_backward(shape, s.qkv_pre, p.param(q_norm_), p.param(k_norm_), s.qk_rstd, d_qkv,
                      p.grad(q_norm_), p.grad(k_norm_));
}

}  // namespace kintsugi
