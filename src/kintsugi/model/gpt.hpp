#pragma once
// The whole GPT in one chunk, on one rank or split across a tensor-parallel group: what serial
// training, benchmarks, generation and tests use.
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/model/model_chunk.hpp"

namespace kintsugi {

class GptModel : public ModelChunk {
 public:
  GptModel(Backend& backend, const ModelConfig& config, DType dtype, std::int64_t micro_batch,
           std::int64_t seq, int slots = 1, TensorParallel tp = {},
           Recompute recompute = Recompute::none, std::int32_t document_end_id = -1)
      : ModelChunk(backend, config,
                   ChunkStorage{.compute = dtype, .grad = dtype, .recompute = recompute},
                   micro_batch, seq, slots, tp, ChunkSpec{.document_end_id = document_end_id}) {}

  // Forward and backward of one micro-batch (tokens and targets [micro_batch * seq], host
  // memory): parameter gradients of grad_scale * (sum of token losses) are written or
  // accumulated (as ParamStore::begin_step decides). Returns the sum of token losses; waits for
  // it (training loops use ModelChunk's asynchronous interface instead).
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                          double grad_scale, int slot = 0, bool last_micro_batch = false) {
    set_batch(slot, tokens, targets);
    forward(slot, true, grad_scale);
    backward(slot, last_micro_batch);
    return read_scalar(loss_sum());
  }
  // Sum of token losses, no gradients.
  double forward_loss(const std::int32_t* tokens, const std::int32_t* targets, int slot = 0) {
    set_batch(slot, tokens, targets);
    forward(slot, false, 0.0);
    return read_scalar(loss_sum());
  }
  // Next-token logits at `position` of sequence 0 (generation); out has vocab_size entries.
  // Runs the whole window.
  void next_token_logits(const std::int32_t* tokens, std::int64_t position, float* out) {
    copy_from_host(tokens, this->tokens(0));
    forward(0, false, 0.0, /*score=*/false);
    head().logits(0, output(0), position, out);
  }
  // The same logits with a key/value cache. prefill_logits runs the first `count` tokens (a
  // prompt) and returns the logits after the last of them; decode_logits then adds one token
  // at `position` (the next free one) against the kept keys and values of those before it.
  void prefill_logits(const std::int32_t* tokens, std::int64_t count, float* out) {
    copy_from_host(tokens, this->tokens(0).rows(0, count));
    extend(0, 0, count);
    head().logits(0, output(0), count - 1, out);
  }
  void decode_logits(std::int32_t token, std::int64_t position, float* out) {
    copy_from_host(&token, this->tokens(0).rows(position, 1));
    extend(0, position, 1);
    head().logits(0, output(0), position, out);
  }

 private:
  void set_batch(int slot, const std::int32_t* tokens, const std::int32_t* targets) {
    load(slot, tokens, targets);
    zero_loss();
  }
};

}  // namespace kintsugi
