#include "kintsugi/model/layers.hpp"

namespace kintsugi {

Linear::Linear(LayerContext& ctx, const std::string& name, std::int64_t in, std::int64_t out,
               bool bias, double init_std)
    : ctx_(ctx) {
  w_ = ctx.params.add({.name = name + ".weight",
                       .global_shape = {out, in},
                       .init = ParamInit::normal,
                       .init_std = init_std,
                       .weight_decay = true});
  if (bias)
    b_ = ctx.params.add({.name = name + ".bias", .global_shape = {out}, .init = ParamInit::zeros});
}

void Linear::forward(const Tensor& x, const Tensor& y) const {
  Tensor b;
  if (b_ >= 0) b = ctx_.params.param(b_);
  ctx_.backend.linear_forward(x, ctx_.params.param(w_), b_ >= 0 ? &b : nullptr, y);
}

void Linear::backward(const Tensor& dy, const Tensor& x, const Tensor* dx,
                      bool accumulate_dx) const {
  auto& p = ctx_.params;
  if (dx) ctx_.backend.linear_backward_input(dy, p.param(w_), *dx, accumulate_dx);
  const bool acc = p.accumulate_grad(w_);
  Tensor db;
  if (b_ >= 0) {
    // Weight and bias gradients are written together, so they share one accumulate flag.
    const bool bias_acc = p.accumulate_grad(b_);
    KINTSUGI_ASSERT(bias_acc == acc);
    db = p.grad(b_);
  }
  ctx_.backend.linear_backward_weight(dy, x, p.grad(w_), b_ >= 0 ? &db : nullptr, acc);
}

LayerNorm::LayerNorm(LayerContext& ctx, const std::string& name, std::int64_t dim, double eps)
    : ctx_(ctx), eps_(eps) {
  w_ = ctx.params.add({.name = name + ".weight", .global_shape = {dim}, .init = ParamInit::ones});
  b_ = ctx.params.add({.name = name + ".bias", .global_shape = {dim}, .init = ParamInit::zeros});
}

void LayerNorm::forward(const Tensor& x, const Tensor& y, const Tensor& mean,
                        const Tensor& rstd) const {
  ctx_.backend.layernorm_forward(x, ctx_.params.param(w_), ctx_.params.param(b_), y, mean, rstd,
                                 eps_);
}

void LayerNorm::backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx) const {
  auto& p = ctx_.params;
  const bool acc = p.accumulate_grad(w_);
  p.accumulate_grad(b_);
  ctx_.backend.layernorm_backward(dy, x, p.param(w_), mean, rstd, dx, p.grad(w_), p.grad(b_),
                                  acc);
}

Embedding::Embedding(LayerContext& ctx, std::int64_t vocab, std::int64_t padded_vocab,
                     std::int64_t max_seq, std::int64_t dim, double init_std)
    : ctx_(ctx) {
  wte_ = ctx.params.add({.name = "embedding.token.weight",
                         .global_shape = {padded_vocab, dim},
                         .init = ParamInit::normal,
                         .init_std = init_std,
                         .weight_decay = true,
                         .valid_rows = vocab});
  wpe_ = ctx.params.add({.name = "embedding.position.weight",
                         .global_shape = {max_seq, dim},
                         .init = ParamInit::normal,
                         .init_std = init_std,
                         .weight_decay = true});
}

void Embedding::forward(const std::int32_t* tokens, std::int64_t seq, const Tensor& out) const {
  Tensor wpe = ctx_.params.param(wpe_);
  ctx_.backend.embedding_forward(tokens, seq, ctx_.params.param(wte_), &wpe, out);
}

void Embedding::backward(const std::int32_t* tokens, std::int64_t seq, const Tensor& dout) const {
  auto& p = ctx_.params;
  // With tied embeddings the LM head has written the token table's gradient already.
  const bool acc = p.accumulate_grad(wte_);
  const bool acc_pos = p.accumulate_grad(wpe_);
  Tensor dwpe = p.grad(wpe_);
  ctx_.backend.embedding_backward(tokens, seq, dout, p.grad(wte_), acc, &dwpe, acc_pos);
}

}  // namespace kintsugi
