#include "kintsugi/model/tensor_parallel_half.hpp"

namespace kintsugi {

TensorParallelHalf::TensorParallelHalf(LayerContext& ctx, const HalfSpec& spec)
    : ctx_(ctx), kind_(spec.kind) {
  // Column splits of SwiGLU's gate and up are the same, so each rank holds matching gate and
  // up columns and multiplies them without communication. qkv rows are grouped per kv head (its
  // query heads, its key, its value; see AttentionShape), so a column split hands each rank
  // whole groups as long as tp divides the kv heads (checked by validate(RunConfig)).
  entries_.reserve(spec.entries.size());
  for (const LinearSpec& l : spec.entries)
    entries_.emplace_back(ctx, l.name, l.in, l.out, Linear::Split::column, l.init_std, spec.entry_bias);
  const LinearSpec& e = spec.exit;
  exit_.emplace(ctx, e.name, e.in, e.out, Linear::Split::row, e.init_std, spec.exit_bias);
}

const Tensor& TensorParallelHalf::full_rows(const Tensor& norm, const BlockWorkspace& ws) const {
  return ctx_.tp.sequence_parallel() ? ws.norm_full : norm;
}

Tensor TensorParallelHalf::enter(const Tensor& norm, const BlockWorkspace& ws) const {
  ctx_.tp.enter(norm, full_rows(norm, ws));
  return full_rows(norm, ws);
}

void TensorParallelHalf::entry(int k, const Tensor& in, const Tensor& out,
                               const BlockWorkspace&) const {
  entries_[k].forward(in, out);
}

void TensorParallelHalf::entry_gelu(const Tensor& in, const Tensor& pre, const Tensor& act,
                                    const BlockWorkspace&) const {
  entries_[0].forward_gelu(in, pre, act);
}

void TensorParallelHalf::exit(const Tensor& act, const Tensor& out,
                              const BlockWorkspace& ws) const {
  // The row-parallel output is a partial sum: reduced (scattered over the rows with sequence
  // parallelism) before the replicated bias is added once.
  const Tensor partial = ctx_.tp.sequence_parallel() ? ws.full : out;
  exit_->forward(act, partial);
  ctx_.tp.leave(partial, out);
  exit_->add_bias(out);
}

Tensor TensorParallelHalf::begin_exit_backward(const Tensor& d_out, const Tensor& norm,
                                               const BlockWorkspace& ws) {
  const TensorParallel& tp = ctx_.tp;
  const Tensor dy = tp.sequence_parallel() ? ws.full : d_out;
  tp.leave_backward(d_out, dy);
  gather_ = tp.sequence_parallel() ? tp.regather_async(norm, ws.norm_full) : CommHandle{};
  return dy;
}

Tensor TensorParallelHalf::exit_backward(const Tensor& d_out, const Tensor& act,
                                         const Tensor& norm, const BlockWorkspace& ws) {
  const Tensor dy = begin_exit_backward(d_out, norm, ws);
  const Tensor d_act = kind_ == HalfSpec::Kind::attention ? ws.d_attn : ws.d_fc;
  exit_->backward(dy, act, &d_act, false);
  return d_act;
}

void TensorParallelHalf::exit_backward_gelu(const Tensor& d_out, const Tensor& act,
                                            const Tensor& pre, const Tensor& d_pre,
                                            const Tensor& norm, const BlockWorkspace& ws) {
  exit_->backward_gelu(begin_exit_backward(d_out, norm, ws), act, pre, d_pre);
}

Tensor TensorParallelHalf::entry_backward(const Tensor& norm, std::span<const Tensor> d_outs,
                                          const BlockWorkspace& ws) {
  gather_.wait();
  const Tensor& in = full_rows(norm, ws);
  for (std::size_t k = 0; k < entries_.size(); ++k)
    entries_[k].backward(d_outs[k], in, &ws.d_norm_full, k > 0);
  ctx_.tp.enter_backward(ws.d_norm_full, ws.d_norm);
  return ws.d_norm;
}

}  // namespace kintsugi
