#include "kintsugi/model/grid_linear.hpp"

#include <vector>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

namespace {

// The first elements of a workspace tensor, seen with `shape`.
Tensor view(const Tensor& t, Shape shape) {
  KINTSUGI_ASSERT(shape.numel() <= t.numel());
  return Tensor{t.data, t.dtype, shape, t.device};
}

}  // namespace

GridLinear::GridLinear(LayerContext& ctx, const std::string& name, std::int64_t in,
                       std::int64_t out, Role role, double init_std, bool bias)
    : ctx_(ctx), role_(role) {
  KINTSUGI_ASSERT(ctx.grid != nullptr);
  const GridShape& g = ctx.grid->shape();
  const GridCoords& c = ctx.grid->coords();
  const bool entry = role == Role::entry;
  const int inner = entry ? g.x : g.y, outer = entry ? g.y : g.x;
  const int inner_rank = entry ? c.x : c.y, outer_rank = entry ? c.y : c.x;
  out_block_ = out / outer;
  in_block_ = in / inner;
  const std::int64_t shard_rows = out_block_ / g.z;
  // The block's rows sharded over z: this rank holds rows [outer_rank out_block + z shard_rows,
  // + shard_rows) and columns [inner_rank in_block, + in_block) of the global weight, a piece
  // no other rank holds.
  w_ = ctx.params.add({.name = name + ".weight",
                       .global_shape = {out, in},
                       .init = ParamInit::normal,
                       .init_std = init_std,
                       .weight_decay = true,
                       .split_dim = 0,
                       .split_begin = outer_rank * out_block_ + c.z * shard_rows,
                       .split_extent = shard_rows,
                       .cols_begin = inner_rank * in_block_,
                       .cols_extent = in_block_});
  if (!bias) return;
  // The bias's outer slice, held whole by every inner rank (the lowest counts it) and every z
  // (ParamStore::mark_replicated_over_depth).
  b_ = ctx.params.add({.name = name + ".bias",
                       .global_shape = {out},
                       .init = ParamInit::zeros,
                       .split_dim = outer > 1 ? 0 : -1,
                       .split_begin = outer_rank * out_block_,
                       .split_extent = out_block_,
                       .duplicate = inner_rank != 0});
}

std::int64_t GridLinear::block_elements(const TensorGrid& grid, std::int64_t in, std::int64_t out,
                                        Role role) {
  const GridShape& g = grid.shape();
  const bool entry = role == Role::entry;
  return out / (entry ? g.y : g.x) * (in / (entry ? g.x : g.y));
}

Communicator& GridLinear::inner() const {
  return role_ == Role::entry ? ctx_.grid->x() : ctx_.grid->y();
}

Communicator& GridLinear::outer() const {
  return role_ == Role::entry ? ctx_.grid->y() : ctx_.grid->x();
}

Tensor GridLinear::block(const GridWorkspace& ws) const {
  const Tensor shard = ctx_.params.param(w_);
  Communicator& z = ctx_.grid->z();
  if (z.size() == 1) return shard;
  const Tensor whole = view(ws.weight, {out_block_, in_block_});
  z.all_gather(shard, whole);
  return whole;
}

void GridLinear::forward(const Tensor& x, const Tensor& y, const GridWorkspace& ws) const {
  Backend& be = ctx_.backend;
  be.linear_forward(x, block(ws), nullptr, y);
  if (inner().size() > 1) inner().all_reduce(y);
  if (b_ >= 0) be.add_bias(y, ctx_.params.param(b_));
}

void GridLinear::backward(const Tensor& dy, const Tensor& x, const Tensor* dx,
                          const GridWorkspace& ws, bool accumulate_dx, bool reduce_dx) const {
  Backend& be = ctx_.backend;
  auto& p = ctx_.params;
  const Tensor w = block(ws);
  if (dx) {
    be.linear_backward_input(dy, w, *dx, accumulate_dx);
    if (reduce_dx && outer().size() > 1) outer().all_reduce(*dx);
  }
  // Weight and bias gradients are written together, so they share one accumulate flag.
  const bool acc = p.accumulate_grad(w_);
  if (b_ >= 0) KINTSUGI_ASSERT(p.accumulate_grad(b_) == acc);
  Communicator& z = ctx_.grid->z();
  if (z.size() == 1) {
    const Tensor db = b_ >= 0 ? p.grad(b_) : Tensor{};
    be.linear_backward_weight(dy, x, p.grad(w_), b_ >= 0 ? &db : nullptr, acc);
    return;
  }
  // The whole block's gradient from this z's rows, then each z rank keeps the sum of its shard.
  const Tensor dw = view(ws.dweight, {out_block_, in_block_});
  const Tensor db = b_ < 0 ? Tensor{} : acc ? view(ws.dbias, {out_block_}) : p.grad(b_);
  be.linear_backward_weight(dy, x, dw, b_ >= 0 ? &db : nullptr, false);
  const Tensor shard = p.grad(w_);
  if (!acc) return z.reduce_scatter(dw, shard);
  const Tensor part = view(ws.dshard, shard.shape);
  z.reduce_scatter(dw, part);
  be.add(shard, part, shard);
  if (b_ >= 0) be.add(p.grad(b_), db, p.grad(b_));
}

void GridColumns::write_indices(std::int64_t rows, const GridWorkspace& ws) const {
  if (whole()) return;
  const std::int64_t gx = grid_.shape().x, x = grid_.coords().x;
  // A [rows, d] tensor seen as [rows Gx, d / Gx]: row r's slice x is row r Gx + x. The slices
  // gathered over x are [Gx][rows] of them, so row j of the interleaved view is gathered row
  // (j % Gx) rows + j / Gx.
  std::vector<std::int32_t> slice(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) slice[r] = static_cast<std::int32_t>(r * gx + x);
  std::vector<std::int32_t> interleave(static_cast<std::size_t>(rows * gx));
  for (std::int64_t j = 0; j < rows * gx; ++j)
    interleave[j] = static_cast<std::int32_t>(j % gx * rows + j / gx);
  copy_from_host(slice.data(), ws.slice_index);
  copy_from_host(interleave.data(), ws.interleave_index);
}

// Both directions are row gathers by index, which is what the embedding lookup is.
void GridColumns::slice(const Tensor& full, const Tensor& part, const GridWorkspace& ws) const {
  if (whole()) {
    KINTSUGI_ASSERT(full.data == part.data);
    return;
  }
  const std::int64_t gx = grid_.shape().x, rows = part.shape[0], cols = part.shape[1];
  backend_.embedding_forward(ws.slice_index, full.reshaped({rows * gx, cols}), part);
}

void GridColumns::gather(const Tensor& part, const Tensor& full, const GridWorkspace& ws) const {
  if (whole()) {
    KINTSUGI_ASSERT(full.data == part.data);
    return;
  }
  const std::int64_t gx = grid_.shape().x, rows = part.shape[0], cols = part.shape[1];
  const Tensor gathered = view(ws.gathered, {gx * rows, cols});
  grid_.x().all_gather(part, gathered);
  backend_.embedding_forward(ws.interleave_index, gathered, full.reshaped({rows * gx, cols}));
}

}  // namespace kintsugi
