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

// Waits for a reduce-scatter still in flight and adds what it completes.
void complete(GridInFlight::Scatter& s, Tracer* tracer) {
  if (!s.pending) return;
  s.pending = false;
  s.handle.wait();
  if (tracer && tracer->enabled()) tracer->record(s.name, kCommunicationLane, s.start, tracer->now());
  if (s.finish) s.finish();
  s.finish = nullptr;
}

}  // namespace

GridLinear::GridLinear(LayerContext& ctx, const std::string& name, std::int64_t in,
                       std::int64_t out, Role role, double init_std, bool bias)
    : ctx_(ctx), name_(name), role_(role) {
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

double GridLinear::trace_now() const {
  return ctx_.tracer && ctx_.tracer->enabled() ? ctx_.tracer->now() : 0;
}

void GridLinear::trace(const char* what, int lane, double start) const {
  if (ctx_.tracer && ctx_.tracer->enabled())
    ctx_.tracer->record(std::string("grid ") + what + " " + name_, lane, start, ctx_.tracer->now());
}

Tensor GridLinear::block(const GridWorkspace& ws) const {
  const Tensor shard = ctx_.params.param(w_);
  Communicator& z = ctx_.grid->z();
  if (z.size() == 1) return shard;
  if (!overlap()) {
    const Tensor whole = view(ws.weight[0], {out_block_, in_block_});
    const double start = trace_now();
    z.all_gather(shard, whole);
    trace("z all-gather", kCommunicationLane, start);
    return whole;
  }
  GridInFlight& f = *ws.flight;
  // The block was gathered ahead into the buffer not in use, or is gathered there now; either
  // way that buffer becomes the one in use. A gather started for another layer (none is, as
  // the blocks call their layers) completes first, so the buffer is free.
  const bool ahead = f.ahead.layer == this;
  if (f.ahead.layer && !ahead) f.ahead.layer->block(ws);
  f.in_use = 1 - f.in_use;
  const Tensor whole = view(ws.weight[f.in_use], {out_block_, in_block_});
  if (ahead) {
    f.ahead.handle.wait();
    f.ahead.layer = nullptr;
    trace("z all-gather", kCommunicationLane, f.ahead.start);
    return whole;
  }
  const double start = trace_now();
  z.all_gather(shard, whole);
  trace("z all-gather", kCommunicationLane, start);
  return whole;
}

void GridLinear::prefetch(const GridWorkspace& ws) const {
  Communicator& z = ctx_.grid->z();
  if (!overlap() || z.size() == 1) return;
  GridInFlight& f = *ws.flight;
  KINTSUGI_ASSERT(f.ahead.layer == nullptr);
  f.ahead.start = trace_now();
  f.ahead.handle = z.all_gather_async(ctx_.params.param(w_),
                                      view(ws.weight[1 - f.in_use], {out_block_, in_block_}));
  f.ahead.layer = this;
}

void GridLinear::forward(const Tensor& x, const Tensor& y, const GridWorkspace& ws,
                         const GridLinear* next) const {
  Backend& be = ctx_.backend;
  const Tensor w = block(ws);
  if (next) next->prefetch(ws);
  double start = trace_now();
  be.linear_forward(x, w, nullptr, y);
  trace("GEMM y", kComputeLane, start);
  if (inner().size() > 1) {
    start = trace_now();
    inner().all_reduce(y);
    trace("all-reduce y", kCommunicationLane, start);
  }
  if (b_ >= 0) be.add_bias(y, ctx_.params.param(b_));
}

void GridLinear::backward(const Tensor& dy, const Tensor& x, const Tensor* dx,
                          const GridWorkspace& ws, bool accumulate_dx, bool reduce_dx,
                          const GridLinear* next) const {
  Backend& be = ctx_.backend;
  const Tensor w = block(ws);
  if (next) next->prefetch(ws);
  // With overlap the all-reduce of dx runs while the weight gradient is computed: that GEMM
  // reads dy and x, never dx.
  CommHandle reduced;
  double reduce_start = 0;
  if (dx) {
    const double start = trace_now();
    be.linear_backward_input(dy, w, *dx, accumulate_dx);
    trace("GEMM dx", kComputeLane, start);
    if (reduce_dx && outer().size() > 1) {
      reduce_start = trace_now();
      reduced = outer().all_reduce_async(*dx);
      if (!overlap()) {
        reduced.wait();
        trace("all-reduce dx", kCommunicationLane, reduce_start);
      }
    }
  }
  weight_gradient(dy, x, ws);
  if (overlap() && dx && reduce_dx && outer().size() > 1) {
    reduced.wait();
    trace("all-reduce dx", kCommunicationLane, reduce_start);
  }
}

void GridLinear::weight_gradient(const Tensor& dy, const Tensor& x,
                                 const GridWorkspace& ws) const {
  Backend& be = ctx_.backend;
  auto& p = ctx_.params;
  // Weight and bias gradients are written together, so they share one accumulate flag.
  const bool acc = p.accumulate_grad(w_);
  if (b_ >= 0) KINTSUGI_ASSERT(p.accumulate_grad(b_) == acc);
  Communicator& z = ctx_.grid->z();
  double start = trace_now();
  if (z.size() == 1) {
    const Tensor db = b_ >= 0 ? p.grad(b_) : Tensor{};
    be.linear_backward_weight(dy, x, p.grad(w_), b_ >= 0 ? &db : nullptr, acc);
    trace("GEMM dW", kComputeLane, start);
    return;
  }
  // The whole block's gradient from this z's rows, then each z rank keeps the sum of its shard.
  // With overlap the buffers alternate, and the reduce-scatter that last used this one ends
  // first.
  GridInFlight& f = *ws.flight;
  const int k = overlap() ? f.next_scatter : 0;
  if (overlap()) {
    f.next_scatter = 1 - k;
    complete(f.scatter[k], ctx_.tracer);
    start = trace_now();
  }
  const Tensor dw = view(ws.dweight[k], {out_block_, in_block_});
  const Tensor db = b_ < 0 ? Tensor{} : acc ? view(ws.dbias[k], {out_block_}) : p.grad(b_);
  be.linear_backward_weight(dy, x, dw, b_ >= 0 ? &db : nullptr, false);
  trace("GEMM dW", kComputeLane, start);
  const Tensor shard = p.grad(w_);
  const Tensor part = acc ? view(ws.dshard[k], shard.shape) : shard;
  // Adds an earlier micro-batch's gradient once this one's shard is reduced.
  std::function<void()> finish;
  if (acc)
    finish = [this, &be, &p, shard, part, db] {
      be.add(shard, part, shard);
      if (b_ >= 0) be.add(p.grad(b_), db, p.grad(b_));
    };
  start = trace_now();
  CommHandle scattered = z.reduce_scatter_async(dw, part);
  if (!overlap()) {
    scattered.wait();
    trace("z reduce-scatter", kCommunicationLane, start);
    if (finish) finish();
    return;
  }
  GridInFlight::Scatter& s = f.scatter[k];
  s = {.handle = std::move(scattered),
       .finish = std::move(finish),
       .name = "grid z reduce-scatter " + name_,
       .start = start,
       .pending = true};
}

void GridLinear::flush(const LayerContext& ctx, const GridWorkspace& ws) {
  if (!ctx.grid->overlap()) return;
  GridInFlight& f = *ws.flight;
  if (f.ahead.layer) f.ahead.layer->block(ws);  // a gather nobody used (none is, as called)
  // Oldest first: the buffer the next layer would have used.
  for (int i = 0; i < 2; ++i) complete(f.scatter[(f.next_scatter + i) % 2], ctx.tracer);
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
