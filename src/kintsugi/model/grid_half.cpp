#include "kintsugi/model/grid_half.hpp"

#include <algorithm>

namespace kintsugi {

GridHalf::GridHalf(LayerContext& ctx, const HalfSpec& spec, GridHalf* before)
    : ctx_(ctx), kind_(spec.kind) {
  using Role = GridLinear::Role;
  // Entry layers split their input over x and their output (whole heads, MLP columns) over y;
  // the exit layer the converse. SwiGLU's gate and up are both entry layers: matching columns
  // on each y rank.
  for (const LinearSpec& l : spec.entries)
    entries_.push_back(std::make_unique<GridLinear>(ctx, l.name, l.in, l.out, Role::entry,
                                                    l.init_std, spec.entry_bias));
  const LinearSpec& e = spec.exit;
  exit_ = std::make_unique<GridLinear>(ctx, e.name, e.in, e.out, Role::exit, e.init_std,
                                       spec.exit_bias);
  if (before) {
    before->forward_next_ = entries_.front().get();
    backward_next_ = before->exit_.get();
  }
}

void GridHalf::layout_workspace(Carver& c, const LayerContext& ctx,
                                std::span<const HalfSpec> halves, std::int64_t rows,
                                GridWorkspace& gw) {
  using Role = GridLinear::Role;
  const TensorGrid& g = *ctx.grid;
  const std::int64_t gx = g.shape().x, gy = g.shape().y, gz = g.shape().z;
  // The largest block of the layers, gathered over z, and its gradient; the widest output (a
  // bias gradient); the MLP's columns on this y; the model width (the residual stream).
  std::int64_t block = 0, widest = 0, d_ff = 0, d = 0;
  for (const HalfSpec& h : halves) {
    for (const LinearSpec& l : h.entries) {
      block = std::max(block, GridLinear::block_elements(g, l.in, l.out, Role::entry));
      widest = std::max(widest, l.out);
    }
    block = std::max(block, GridLinear::block_elements(g, h.exit.in, h.exit.out, Role::exit));
    widest = std::max(widest, h.exit.out);
    if (h.kind == HalfSpec::Kind::mlp) d_ff = h.exit.in;
    d = h.exit.out;
  }
  const DType dt = ctx.dtype, gt = ctx.params.grad_dtype();
  // Overlap keeps a second copy of each: one layer's block computes while the next one's is
  // gathered, and one layer's gradient is reduce-scattered while the next one's is computed.
  const int copies = gz == 1 ? 0 : ctx.grid->overlap() ? 2 : 1;
  for (int k = 0; k < copies; ++k) {
    gw.weight[k] = c.take(dt, {block});
    gw.dweight[k] = c.take(gt, {block});
    gw.dshard[k] = c.take(gt, {block / gz});
    gw.dbias[k] = c.take(gt, {widest});
  }
  gw.d_act = c.take(dt, {rows, d_ff / gy});
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

void GridHalf::fill_workspace(const LayerContext& ctx, std::int64_t rows,
                              const GridWorkspace& ws) {
  GridColumns(ctx.backend, *ctx.grid).write_indices(rows, ws);
}

Tensor GridHalf::slice(const Tensor& full, const Tensor& part, const GridWorkspace& g) const {
  const GridColumns cols = columns();
  if (cols.whole()) return full;
  cols.slice(full, part, g);
  return part;
}

const GridLinear* GridHalf::after_entry(std::size_t k) const {
  return k + 1 < entries_.size() ? entries_[k + 1].get() : exit_.get();
}

Tensor GridHalf::enter(const Tensor& norm, const BlockWorkspace& ws) const {
  return slice(norm, ws.grid.in, ws.grid);
}

void GridHalf::entry(int k, const Tensor& in, const Tensor& out, const BlockWorkspace& ws) const {
  entries_[k]->forward(in, out, ws.grid, after_entry(k));
}

void GridHalf::entry_gelu(const Tensor& in, const Tensor& pre, const Tensor& act,
                          const BlockWorkspace& ws) const {
  // The GELU runs on this y's columns where they are.
  entry(0, in, pre, ws);
  ctx_.backend.gelu_forward(pre, act);
}

void GridHalf::exit(const Tensor& act, const Tensor& out, const BlockWorkspace& ws) const {
  const GridWorkspace& g = ws.grid;
  const GridColumns cols = columns();
  const Tensor part = cols.whole() ? out : g.out;
  exit_->forward(act, part, g, forward_next_);
  cols.gather(part, out, g);
}

Tensor GridHalf::exit_backward(const Tensor& d_out, const Tensor& act, const Tensor&,
                               const BlockWorkspace& ws) {
  const GridWorkspace& g = ws.grid;
  const Tensor d_act = kind_ == HalfSpec::Kind::attention ? ws.d_attn : g.d_act;
  exit_->backward(slice(d_out, g.d_out, g), act, &d_act, g, false, true, entries_.front().get());
  return d_act;
}

void GridHalf::exit_backward_gelu(const Tensor& d_out, const Tensor& act, const Tensor& pre,
                                  const Tensor& d_pre, const Tensor& norm,
                                  const BlockWorkspace& ws) {
  ctx_.backend.gelu_backward(pre, exit_backward(d_out, act, norm, ws), d_pre);
}

Tensor GridHalf::entry_backward(const Tensor& norm, std::span<const Tensor> d_outs,
                                const BlockWorkspace& ws) {
  const GridWorkspace& g = ws.grid;
  const GridColumns cols = columns();
  // The entry layers' input gradients are summed before their one reduction over y, then
  // gathered over x into whole rows.
  const Tensor in = slice(norm, g.in, g);
  const Tensor d_in = cols.whole() ? ws.d_norm_full : g.d_in;
  const std::size_t last = entries_.size() - 1;
  for (std::size_t k = 0; k <= last; ++k)
    entries_[k]->backward(d_outs[k], in, &d_in, g, k > 0, k == last,
                          k < last ? entries_[k + 1].get() : backward_next_);
  cols.gather(d_in, ws.d_norm_full, g);
  return ws.d_norm_full;
}

void GridHalf::finish_backward(const BlockWorkspace& ws) const {
  // The last weight-gradient reduce-scatters ran on while the x gather and the norm computed;
  // the block's gradients are final once they end (model/grid_linear.hpp).
  GridLinear::flush(ctx_, ws.grid);
}

}  // namespace kintsugi
