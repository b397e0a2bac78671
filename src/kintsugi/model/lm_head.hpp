#pragma once
// Final norm (LayerNorm, or RMSNorm for Llama), the language-model head (tied to the token
// embedding, or for Llama a matrix of its own with the same vocabulary split), and the cross-entropy
// loss, vocabulary-parallel across tensor-parallel ranks: each rank multiplies by its rows of
// the embedding, so it holds logits for its slice of the vocabulary only, and the softmax
// combines per-row statistics (maximum, sum of exponentials, the target's logit) through
// all-reduces of a few numbers per row. The full logits are never gathered.
//
// The head runs its forward and backward together, chunk by chunk of rows, so a micro-batch
// never holds more than one chunk of logits (rows x vocabulary is the largest tensor of a GPT:
// 3.3 GB of bf16 for GPT-2 at 32 x 1024 tokens). What backward later needs is only the gradient
// at the final norm's output.
//
// Logits are kept in the compute type (bf16/f16 under mixed precision, as PyTorch autocast and
// llm.c keep them); the softmax statistics and the loss are f32. Without vocabulary parallelism
// the loss is one backend op (Backend::cross_entropy_fused), otherwise the three passes with
// all-reduces between them. KINTSUGI_FUSED_LOSS=0 restores f32 logits and the three passes on
// every layout (for timing one against the other).
#include <vector>

#include "kintsugi/model/activation_pool.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

class LmHead {
 public:
  // tied_embedding_param: the chunk's token embedding, or -1 when the embedding lives in another
  // pipeline stage; then the head registers its own tied copy of it. Untied families ignore it.
  LmHead(LayerContext& ctx, const ModelConfig& config, int tied_embedding_param);

  // Per-micro-batch tensors in every slot of `pool` (segment "head"), workspace for `rows`.
  void allocate(ActivationPool& pool, std::int64_t rows);

  // Forward and backward through norm, head and loss for one micro-batch; x [local rows, d],
  // targets i32 [all rows]. Accumulates the head's weight gradient of
  // grad_scale * (sum of token losses) and keeps dL/d(norm output) for backward(). Adds the sum
  // of the token losses (all rows) to loss_sum().
  void forward_backward(int slot, const Tensor& x, const Tensor& targets, double grad_scale);
  // d_residual = dL/dx (overwritten).
  void backward(int slot, const Tensor& x, const Tensor& d_residual);
  // Loss only (evaluation): adds the sum of the token losses to loss_sum().
  void forward_loss(int slot, const Tensor& x, const Tensor& targets);
  // f64 [1] on the device: the token losses added up since the owner last zeroed it.
  const Tensor& loss_sum() const { return loss_sum_; }
  // Logits of one row of x (generation; one rank), into out [vocab] (f32, host memory).
  void logits(int slot, const Tensor& x, std::int64_t row, float* out);

 private:
  struct Saved {
    Tensor norm, mean, rstd, d_norm;  // local rows
  };
  // Norm forward and, with sequence parallelism, the gather of its output to all rows.
  Tensor norm_forward(int slot, const Tensor& x);
  // Loss (and with backward, gradient) over rows [r0, r0 + n) of the gathered norm output.
  void chunk(const Tensor& norm_full, std::int64_t r0, std::int64_t n, const Tensor& targets,
             bool backward, double grad_scale, const Tensor& d_full);
  // The vocabulary-parallel loss over one chunk's logits: row statistics, all-reduced across
  // the tensor-parallel ranks between the passes.
  void three_pass_loss(const Tensor& logits, const Tensor& chunk_targets, bool backward,
                       double grad_scale);

  LayerContext& ctx_;
  std::int64_t vocab_, d_;
  int wte_;
  std::int64_t vocab_begin_ = 0, local_vocab_ = 0, local_valid_ = 0;
  LayerNorm norm_;
  DType logits_dtype_ = DType::f32;
  bool fused_ = false;              // Backend::cross_entropy_fused (else the three passes)
  std::int64_t chunk_budget_ = 0;   // bytes of logits per chunk at most
  std::int64_t rows_ = 0, chunk_rows_ = 0;
  std::vector<Saved> saved_;
  Buffer workspace_;
  Tensor logits_;              // [chunk_rows, local vocabulary]
  Tensor row_max_, row_stats_;  // [chunk_rows], [2, chunk_rows]: sum of exp, target logit
  Tensor row_logits_;          // [1, local vocabulary], statistics type (generation)
  Tensor full_, d_full_;       // [rows, d] (sequence parallel only)
  Tensor loss_sum_;            // f64 [1]
};

}  // namespace kintsugi
