#include "kintsugi/model/layers.hpp"

namespace kintsugi {

Linear::Linear(LayerContext& ctx, const std::string& name, std::int64_t in, std::int64_t out,
               Split split, double init_std, bool bias)
    : ctx_(ctx), split_(split) {
  const TensorParallel& tp = ctx.tp;
  const int dim = split == Split::column ? 0 : 1;
  const std::int64_t n = split == Split::column ? out : in;
  w_ = ctx.params.add({.name = name + ".weight",
                       .global_shape = {out, in},
                       .init = ParamInit::normal,
                       .init_std = init_std,
                       .weight_decay = true,
                       .split_dim = tp.size() > 1 ? dim : -1,
                       .split_begin = tp.shard_begin(n),
                       .split_extent = tp.shard_extent(n)});
  const bool column = split == Split::column;
  if (!bias) return;
  b_ = ctx.params.add({.name = name + ".bias",
                       .global_shape = {out},
                       .init = ParamInit::zeros,
                       .split_dim = column && tp.size() > 1 ? 0 : -1,
                       .split_begin = tp.shard_begin(out),
                       .split_extent = tp.shard_extent(out)});
}

void Linear::forward(const Tensor& x, const Tensor& y) const {
  const bool bias = split_ == Split::column && b_ >= 0;
  const Tensor b = bias ? ctx_.params.param(b_) : Tensor{};
  ctx_.backend.linear_forward(x, ctx_.params.param(w_), bias ? &b : nullptr, y);
}

void Linear::add_bias(const Tensor& y) const {
  KINTSUGI_ASSERT(split_ == Split::row);
  if (b_ >= 0) ctx_.backend.add_bias(y, ctx_.params.param(b_));
}

void Linear::forward_gelu(const Tensor& x, const Tensor& pre, const Tensor& y) const {
  KINTSUGI_ASSERT(split_ == Split::column);
  const Tensor b = b_ >= 0 ? ctx_.params.param(b_) : Tensor{};
  ctx_.backend.linear_gelu_forward(x, ctx_.params.param(w_), b_ >= 0 ? &b : nullptr, pre, y);
}

void Linear::backward(const Tensor& dy, const Tensor& x, const Tensor* dx,
                      bool accumulate_dx) const {
  if (dx) ctx_.backend.linear_backward_input(dy, ctx_.params.param(w_), *dx, accumulate_dx);
  backward_weights(dy, x);
}

void Linear::backward_gelu(const Tensor& dy, const Tensor& x, const Tensor& pre,
                           const Tensor& dx) const {
  ctx_.backend.linear_backward_input_gelu(dy, ctx_.params.param(w_), pre, dx);
  backward_weights(dy, x);
}

void Linear::backward_weights(const Tensor& dy, const Tensor& x) const {
  auto& p = ctx_.params;
  // Weight and bias gradients are written together, so they share one accumulate flag.
  const bool acc = p.accumulate_grad(w_);
  if (b_ < 0) return ctx_.backend.linear_backward_weight(dy, x, p.grad(w_), nullptr, acc);
  KINTSUGI_ASSERT(p.accumulate_grad(b_) == acc);
  const Tensor db = p.grad(b_);
  ctx_.backend.linear_backward_weight(dy, x, p.grad(w_), &db, acc);
}

LayerNorm::LayerNorm(LayerContext& ctx, const std::string& name, std::int64_t dim, double eps,
                     bool rms)
    : ctx_(ctx), eps_(eps) {
  const bool sp = ctx.tp.sequence_parallel();
  w_ = ctx.params.add({.name = name + ".weight", .global_shape = {dim}, .init = ParamInit::ones,
                       .sequence_parallel_grad = sp});
  if (rms) return;
  b_ = ctx.params.add({.name = name + ".bias", .global_shape = {dim}, .init = ParamInit::zeros,
                       .sequence_parallel_grad = sp});
}

void LayerNorm::forward(const Tensor& x, const Tensor& y, const Tensor& mean,
                        const Tensor& rstd) const {
  if (rms()) return ctx_.backend.rmsnorm_forward(x, ctx_.params.param(w_), y, rstd, eps_);
  ctx_.backend.layernorm_forward(x, ctx_.params.param(w_), ctx_.params.param(b_), y, mean, rstd,
                                 eps_);
}

void LayerNorm::backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx) const {
  auto& p = ctx_.params;
  const bool acc = p.accumulate_grad(w_);
  if (rms()) return ctx_.backend.rmsnorm_backward(dy, x, p.param(w_), rstd, dx, p.grad(w_), acc);
  p.accumulate_grad(b_);
  ctx_.backend.layernorm_backward(dy, x, p.param(w_), mean, rstd, dx, p.grad(w_), p.grad(b_),
                                  acc);
}

ParamSpec token_embedding_spec(const TensorParallel& tp, std::int64_t vocab,
                               std::int64_t padded_vocab, std::int64_t dim, double init_std) {
  return {.name = "embedding.token.weight",
          .global_shape = {padded_vocab, dim},
          .init = ParamInit::normal,
          .init_std = init_std,
          .weight_decay = true,
          .split_dim = tp.size() > 1 ? 0 : -1,
          .split_begin = tp.shard_begin(padded_vocab),
          .split_extent = tp.shard_extent(padded_vocab),
          .valid_rows = vocab};
}

Embedding::Embedding(LayerContext& ctx, std::int64_t vocab, std::int64_t padded_vocab,
                     std::int64_t max_seq, std::int64_t dim, double init_std, bool positions)
    : ctx_(ctx) {
  const TensorParallel& tp = ctx.tp;
  wte_ = ctx.params.add(token_embedding_spec(tp, vocab, padded_vocab, dim, init_std));
  if (!positions) return;
  wpe_ = ctx.params.add({.name = "embedding.position.weight",
                         .global_shape = {max_seq, dim},
                         .init = ParamInit::normal,
                         .init_std = init_std,
                         .weight_decay = true,
                         .sequence_parallel_grad = tp.sequence_parallel()});
}

std::int64_t Embedding::vocab_begin() const { return ctx_.params.entry(wte_).spec.split_begin; }

void Embedding::lookup(const Tensor& tokens, const Tensor& partial) const {
  ctx_.backend.embedding_forward(tokens, ctx_.params.param(wte_), partial, vocab_begin());
}

void Embedding::add_positions(const Tensor& x_local, std::int64_t seq, std::int64_t first_row,
                              const Tensor& positions, const Tensor& scratch) const {
  if (wpe_ < 0) return;
  if (positions.empty()) {
    ctx_.backend.position_embedding_forward(x_local, ctx_.params.param(wpe_), seq, first_row);
    return;
  }
  // Arbitrary position ids are a lookup like tokens', and their gradient a scatter-add.
  const Tensor rows = scratch.rows(0, x_local.shape[0]);
  ctx_.backend.embedding_forward(positions, ctx_.params.param(wpe_), rows);
  ctx_.backend.add(x_local, rows, x_local);
}

void Embedding::backward_positions(const Tensor& dx_local, std::int64_t seq,
                                   std::int64_t first_row, const Tensor& positions) const {
  if (wpe_ < 0) return;
  auto& p = ctx_.params;
  if (positions.empty())
    ctx_.backend.position_embedding_backward(dx_local, p.grad(wpe_), seq,
                                             p.accumulate_grad(wpe_), first_row);
  else
    ctx_.backend.embedding_backward(positions, dx_local, p.grad(wpe_), p.accumulate_grad(wpe_));
}

void Embedding::backward_lookup(const Tensor& tokens, const Tensor& dfull) const {
  // With tied embeddings the LM head has written the token table's gradient already.
  auto& p = ctx_.params;
  ctx_.backend.embedding_backward(tokens, dfull, p.grad(wte_), p.accumulate_grad(wte_),
                                  vocab_begin());
}

}  // namespace kintsugi
