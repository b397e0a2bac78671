#pragma once
// Layers with explicit forward and backward (docs/design.md principle 1). A layer registers its
// parameters in the chunk's ParamStore and keeps only their indices; activations are passed in
// by the caller, which owns the per-micro-batch storage and the tensor-parallel communication
// around them (comm/tensor_parallel.hpp). Gradients of parameters follow the store's
// first-write-overwrites rule.
#include <string>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/comm/grid_groups.hpp"
#include "kintsugi/comm/tensor_parallel.hpp"
#include "kintsugi/model/context_parallel.hpp"
#include "kintsugi/core/trace.hpp"

namespace kintsugi {

// What every layer needs to run: the backend, the parameters of its model chunk, and the
// tensor-parallel group it is split across. `dtype` is the compute type of activations and
// weights; statistics (norm means and inverse deviations, attention log-sum-exp, logits and
// softmax sums) are kept in `statistics()`: f32, or f64 in double-precision checks.
struct LayerContext {
  Backend& backend;
  ParamStore& params;
  DType dtype;
  TensorParallel tp;
  // 3D tensor parallelism (model/grid_linear.hpp): the blocks' linear layers use this grid and
  // `tp` is its xy plane (embeddings, LM head and loss); null otherwise.
  const TensorGrid* grid = nullptr;
  // Where a traced step records the grid's collectives (null: nowhere).
  Tracer* tracer = nullptr;
  // Context parallelism: the ranks splitting each sequence (model/context_parallel.hpp).
  ContextParallel cp;
  // Expert parallelism (model/moe_layer.hpp): the ranks splitting the experts (null: none) and
  // the store their experts' parameters register in (apart from the others: their gradients
  // are summed and their ZeRO state sharded over another group).
  Communicator* ep = nullptr;
  ParamStore* expert_params = nullptr;
  int expert_ranks() const { return ep ? ep->size() : 1; }
  // Ranks the attention heads and MLP columns are split over: the grid's y, or tp.
  int head_split() const { return grid ? grid->shape().y : tp.size(); }
  int head_rank() const { return grid ? grid->coords().y : tp.rank(); }
  DType statistics() const { return dtype == DType::f64 ? DType::f64 : DType::f32; }
};

// y = x . W^T + b with W [out, in]. Across tensor-parallel ranks:
//   column: each rank holds out/tp rows of W and of b; it reads the whole input and writes its
//           slice of the output columns.
//   row:    each rank holds in/tp columns of W; it reads its slice of the input columns and
//           writes a partial sum of the whole output, to which the caller adds the bias
//           (replicated) once the partial sums are reduced.
class Linear {
 public:
  enum class Split { column, row };
  // bias false: no bias parameter at all (Llama), so forward, add_bias and backward skip it.
  Linear(LayerContext& ctx, const std::string& name, std::int64_t in, std::int64_t out,
         Split split, double init_std, bool bias = true);
  // column: y = x W^T + b.  row: y = x W^T (partial; see add_bias).
  void forward(const Tensor& x, const Tensor& y) const;
  void add_bias(const Tensor& y) const;  // row only; nothing without a bias
  // Parameter gradients from dy and the forward input x; dx (+)= dy . W when dx is given.
  // For a row-parallel layer dy is the gradient of the whole (reduced) output.
  void backward(const Tensor& dy, const Tensor& x, const Tensor* dx, bool accumulate_dx) const;
  // A GELU MLP's two layers, with the activation in the GEMMs where the backend fuses it
  // (Backend::linear_gelu_forward, linear_backward_input_gelu):
  // column only: pre = x W^T + b, y = gelu(pre).
  void forward_gelu(const Tensor& x, const Tensor& pre, const Tensor& y) const;
  // The layer after the GELU whose input was `pre`: backward with dx = gelu'(pre) * (dy . W)
  // (overwritten).
  void backward_gelu(const Tensor& dy, const Tensor& x, const Tensor& pre, const Tensor& dx) const;

 private:
  void backward_weights(const Tensor& dy, const Tensor& x) const;

  LayerContext& ctx_;
  Split split_;
  int w_ = -1, b_ = -1;
};

// LayerNorm (weight and bias), or with rms RMSNorm (weight only; Llama), which keeps no mean:
// `mean` is ignored and may be an empty tensor.
class LayerNorm {
 public:
  LayerNorm(LayerContext& ctx, const std::string& name, std::int64_t dim, double eps,
            bool rms = false);
  bool rms() const { return b_ < 0; }
  void forward(const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& rstd) const;
  // dx += gradient through the norm (dx holds the residual gradient already).
  void backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                const Tensor& dx) const;

 private:
  LayerContext& ctx_;
  int w_ = -1, b_ = -1;
  double eps_;
};

// The token embedding table: rows padded to padded_vocab and split by vocabulary rows across
// tensor-parallel ranks. Shared by the embedding and the tied LM head.
ParamSpec token_embedding_spec(const TensorParallel& tp, std::int64_t vocab,
                               std::int64_t padded_vocab, std::int64_t dim, double init_std);

// Token embedding plus, with positions, the learned position embedding (replicated; GPT-2).
// Llama and BLOOM have none: their positions enter in attention (RoPE, ALiBi).
class Embedding {
 public:
  Embedding(LayerContext& ctx, std::int64_t vocab, std::int64_t padded_vocab,
            std::int64_t max_seq, std::int64_t dim, double init_std, bool positions = true);
  // partial [rows, d] <- this rank's vocabulary rows (zero for ids other ranks own).
  void lookup(const Tensor& tokens, const Tensor& partial) const;
  // x_local += positions of its rows, first_row being the global row of x_local's first row
  // (nothing without learned positions). A row's position is its row in the sequence, or with
  // document attention the i32 `positions` of x_local's rows (positions restart at each
  // document), looked up into `scratch` ([rows of x_local, d] at least) and added.
  void add_positions(const Tensor& x_local, std::int64_t seq, std::int64_t first_row,
                     const Tensor& positions = {}, const Tensor& scratch = {}) const;
  void backward_positions(const Tensor& dx_local, std::int64_t seq, std::int64_t first_row,
                          const Tensor& positions = {}) const;
  bool has_positions() const { return wpe_ >= 0; }
  void backward_lookup(const Tensor& tokens, const Tensor& dfull) const;
  int token_param() const { return wte_; }
  std::int64_t vocab_begin() const;

 private:
  LayerContext& ctx_;
  int wte_ = -1, wpe_ = -1;
};

}  // namespace kintsugi
