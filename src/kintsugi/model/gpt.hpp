#pragma once
// A GPT-2 model on one rank: token and position embeddings, n_layer transformer blocks, and
// the tied LM head with its loss. Parameters live in one flat ParamStore; activations for
// `slots` micro-batches in flight are allocated once, up front.
#include <memory>
#include <vector>

#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"
#include "kintsugi/model/lm_head.hpp"
#include "kintsugi/model/transformer_block.hpp"

namespace kintsugi {

class GptModel {
 public:
  // micro_batch x seq tokens per forward; seq <= config.seq_len.
  GptModel(Backend& backend, const ModelConfig& config, DType dtype, std::int64_t micro_batch,
           std::int64_t seq, int slots = 1);

  const ModelConfig& config() const { return config_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  std::int64_t micro_batch() const { return batch_; }
  std::int64_t seq() const { return seq_; }

  // Forward and backward of one micro-batch (tokens and targets [micro_batch * seq]).
  // Parameter gradients of dL/dθ with L = grad_scale * (sum of token losses) are written or
  // accumulated (ParamStore::begin_step decides). Returns the sum of token losses.
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          double grad_scale, int slot = 0);
  // Sum of token losses, no gradients.
  double forward_loss(const std::int32_t* tokens, const std::int32_t* targets, int slot = 0);
  // Next-token logits at `position` of sequence 0 (generation); out has vocab_size entries.
  void next_token_logits(const std::int32_t* tokens, std::int64_t position, float* out);

 private:
  void forward_blocks(const std::int32_t* tokens, int slot);

  ModelConfig config_;
  std::int64_t batch_, seq_;
  ParamStore params_;
  LayerContext ctx_;
  Embedding embedding_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  LmHead head_;
  std::vector<std::vector<Tensor>> residual_;  // [slot][i]: input of block i; [n_layer]: output
  std::vector<Buffer> residual_storage_;
  BlockWorkspace workspace_;
  Tensor d_residual_;
  Buffer workspace_storage_;
};

}  // namespace kintsugi
