#pragma once
// Layers with explicit forward and backward (DESIGN.md principle 1). A layer registers its
// parameters in the chunk's ParamStore and keeps only their indices; activations are passed in
// by the caller, which owns the per-micro-batch storage. Gradients of parameters follow the
// store's first-write-overwrites rule.
#include <string>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/model/param_store.hpp"

namespace kintsugi {

// What every layer needs to run: the backend and the parameters of its model chunk.
struct LayerContext {
  Backend& backend;
  ParamStore& params;
  DType dtype;
};

class Linear {
 public:
  // y = x . W^T + b with W [out, in].
  Linear(LayerContext& ctx, const std::string& name, std::int64_t in, std::int64_t out,
         bool bias, double init_std);
  void forward(const Tensor& x, const Tensor& y) const;
  // Parameter gradients from dy and the forward input x; dx (+)= dy . W when dx is given.
  void backward(const Tensor& dy, const Tensor& x, const Tensor* dx, bool accumulate_dx) const;
  Tensor weight() const { return ctx_.params.param(w_); }

 private:
  LayerContext& ctx_;
  int w_ = -1, b_ = -1;
};

class LayerNorm {
 public:
  LayerNorm(LayerContext& ctx, const std::string& name, std::int64_t dim, double eps);
  void forward(const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& rstd) const;
  // dx += gradient through the norm (dx holds the residual gradient already).
  void backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                const Tensor& dx) const;

 private:
  LayerContext& ctx_;
  int w_ = -1, b_ = -1;
  double eps_;
};

// Token embedding (its rows padded to padded_vocab) plus learned position embedding.
class Embedding {
 public:
  Embedding(LayerContext& ctx, std::int64_t vocab, std::int64_t padded_vocab,
            std::int64_t max_seq, std::int64_t dim, double init_std);
  void forward(const std::int32_t* tokens, std::int64_t seq, const Tensor& out) const;
  void backward(const std::int32_t* tokens, std::int64_t seq, const Tensor& dout) const;
  int token_param() const { return wte_; }

 private:
  LayerContext& ctx_;
  int wte_ = -1, wpe_ = -1;
};

}  // namespace kintsugi
