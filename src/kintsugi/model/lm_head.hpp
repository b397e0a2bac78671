#pragma once
// Final LayerNorm, the language-model head tied to the token embedding, and the cross-entropy
// loss. The head runs its forward and backward together, chunk by chunk of rows, so a
// micro-batch never holds more than one chunk of logits (rows x vocabulary is the largest
// tensor of a GPT: 3.3 GB for GPT-2 at 16 x 1024 tokens). What backward later needs is only
// the gradient at the final norm's output.
#include <vector>

#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

class LmHead {
 public:
  LmHead(LayerContext& ctx, const ModelConfig& config, int tied_embedding_param);

  void allocate(int slots, std::int64_t rows);

  // Forward and backward through norm, head and loss for one micro-batch. Writes each token's
  // loss into `losses` [rows], accumulates the head's weight gradient scaled by grad_scale, and
  // keeps dL/d(norm output) for backward(). Returns the sum of the token losses.
  double forward_backward(int slot, const Tensor& x, const std::int32_t* targets,
                          double grad_scale);
  // d_residual = dL/dx (overwritten).
  void backward(int slot, const Tensor& x, const Tensor& d_residual);
  // Loss only (evaluation): returns the sum of the token losses.
  double forward_loss(int slot, const Tensor& x, const std::int32_t* targets);
  // Logits of one row of x (generation), into `logits` [vocab] (f32).
  void logits(int slot, const Tensor& x, std::int64_t row, float* out);

 private:
  struct Saved {
    Tensor norm, mean, rstd, d_norm;
  };
  void norm_forward(int slot, const Tensor& x);

  LayerContext& ctx_;
  std::int64_t vocab_, padded_vocab_, d_;
  int wte_;
  LayerNorm norm_;
  std::int64_t rows_ = 0, chunk_rows_ = 0;
  std::vector<Saved> saved_;
  std::vector<Buffer> storage_;
  Buffer workspace_;
  Tensor logits_;           // [chunk_rows, padded_vocab]
  std::vector<double> losses_;
};

}  // namespace kintsugi
