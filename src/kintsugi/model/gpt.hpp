#pragma once
// A GPT-2 model on one rank: token and position embeddings, n_layer transformer blocks, and
// the tied LM head with its loss, optionally split across a tensor-parallel group. Parameters
// live in one flat ParamStore; activations for `slots` micro-batches in flight are allocated
// once, up front.
#include <functional>
#include <memory>
#include <vector>

#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"
#include "kintsugi/model/lm_head.hpp"
#include "kintsugi/model/transformer_block.hpp"

namespace kintsugi {

class GptModel {
 public:
  // micro_batch x seq tokens per forward; seq <= config.seq_len. The model is split across
  // `tp` (a single rank by default); the caller has validated that it divides the model.
  GptModel(Backend& backend, const ModelConfig& config, DType dtype, std::int64_t micro_batch,
           std::int64_t seq, int slots = 1, TensorParallel tp = {});

  const ModelConfig& config() const { return config_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  std::int64_t micro_batch() const { return batch_; }
  std::int64_t seq() const { return seq_; }

  // Forward and backward of one micro-batch (tokens and targets [micro_batch * seq]).
  // Parameter gradients of dL/dθ with L = grad_scale * (sum of token losses) are written or
  // accumulated (ParamStore::begin_step decides). Returns the sum of token losses.
  // With last_micro_batch, grads_final (if set) is told as each layer's gradients become final.
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          double grad_scale, int slot = 0, bool last_micro_batch = false);
  // Sum of token losses, no gradients.
  double forward_loss(const std::int32_t* tokens, const std::int32_t* targets, int slot = 0);
  // Next-token logits at `position` of sequence 0 (generation); out has vocab_size entries.
  void next_token_logits(const std::int32_t* tokens, std::int64_t position, float* out);

  // Called during the backward of a step's last micro-batch with k whenever the gradients of
  // parameters k.. are final (layers finish in reverse order, so k only decreases).
  void set_grads_final_callback(std::function<void(int first_param)> callback) {
    grads_final_ = std::move(callback);
  }

 private:
  void forward_blocks(const std::int32_t* tokens, int slot);
  void grads_final(bool last, int first_param) const {
    if (last && grads_final_) grads_final_(first_param);
  }

  ModelConfig config_;
  std::int64_t batch_, seq_;
  ParamStore params_;
  LayerContext ctx_;
  Embedding embedding_;
  std::vector<int> block_first_param_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  int head_first_param_;
  LmHead head_;
  std::vector<std::vector<Tensor>> residual_;  // [slot][i]: input of block i; [n_layer]: output
  std::vector<Buffer> residual_storage_;
  BlockWorkspace workspace_;
  Tensor d_residual_;
  Buffer workspace_storage_;
  std::function<void(int)> grads_final_;
};

}  // namespace kintsugi
