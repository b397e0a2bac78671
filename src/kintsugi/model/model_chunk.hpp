#pragma once
// A contiguous piece of a GPT on one rank: optionally the embeddings (first chunk), a range of
// transformer blocks, optionally the final norm, tied LM head and loss (last chunk), split
// across a tensor-parallel group. A pipeline stage holds one chunk (or v, interleaved); a serial
// run holds one chunk with everything (GptModel).
//
// Parameters live in one flat ParamStore per chunk. Activations for `slots` micro-batches in
// flight are allocated once, up front; each slot has an input, an output and a gradient buffer,
// which the pipeline executor receives into and sends from.
#include <functional>
#include <memory>
#include <vector>

#include "kintsugi/model/activation_pool.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"
#include "kintsugi/model/lm_head.hpp"
#include "kintsugi/model/transformer_block.hpp"
#include "kintsugi/model/unit_observer.hpp"

namespace kintsugi {

struct ChunkSpec {
  int first_layer = 0;
  int num_layers = -1;    // -1: to the last layer
  bool embedding = true;  // holds the embeddings (the first chunk of the model)
  bool head = true;       // holds final norm, LM head and loss (the last chunk)
  // Document attention (data.document_attention) when >= 0: the id that ends a document.
  // Attention does not cross it and positions restart after it (load).
  std::int32_t document_end_id = -1;
  // Mixture of experts: its losses' weights in the objective (model/moe_layer.hpp).
  MoeLossWeights moe_loss;
};

// Element types and storage of a chunk. Activations and parameters use the compute type;
// gradients their own (f32 with mixed precision). With allocate = false the chunk only
// registers its parameters (in units of unit_multiple elements) and a training state owns and
// binds their storage, e.g. sharded across data-parallel ranks. `recompute` says which
// activations each block keeps per micro-batch.
struct ChunkStorage {
  DType compute = DType::f32;
  DType grad = DType::f32;
  bool allocate = true;
  std::int64_t unit_multiple = 16;
  Recompute recompute = Recompute::none;
  // Expert parallelism: the expert store's units' multiple (sharded over the dp / ep ranks).
  std::int64_t expert_unit_multiple = 16;
};

class ModelChunk {
 public:
  // micro_batch x seq tokens per forward; seq <= config.seq_len. The chunk is split across `tp`
  // (a single rank by default); the caller has validated that it divides the model.
  // Activations live in `slots` slots of the chunk's own, or with `shared` in the slots of the
  // rank's pool (as many), which its other chunks use too (activation_pool.hpp). With `grid`
  // (3D tensor parallelism) the blocks' linear layers are split over it, `tp` is its xy plane
  // and micro_batch this z's share of the sequences (model/grid_linear.hpp). With `cp`
  // (context parallelism) each sequence of seq tokens is split over its ranks: this chunk
  // holds cp.local_seq(seq) rows of each (model/context_parallel.hpp).
  ModelChunk(Backend& backend, const ModelConfig& config, ChunkStorage storage,
             std::int64_t micro_batch, std::int64_t seq, int slots, TensorParallel tp,
             ChunkSpec spec, ActivationPool* shared = nullptr, const TensorGrid* grid = nullptr,
             ContextParallel cp = {}, Communicator* ep = nullptr);
  virtual ~ModelChunk() = default;

  const ModelConfig& config() const { return config_; }
  const ChunkSpec& spec() const { return spec_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  // Expert parallelism (`ep` given): this rank's experts, one unit per block, in a store of
  // their own (docs/moe.md); null otherwise.
  ParamStore* expert_params() { return expert_params_.get(); }
  const ParamStore* expert_params() const { return expert_params_.get(); }
  std::int64_t micro_batch() const { return batch_; }
  std::int64_t seq() const { return seq_; }  // the whole sequence's length (all cp ranks')
  int slots() const { return static_cast<int>(residual_.size()); }

  // [local rows, d] buffers of a slot: the activation entering the chunk (received, unless the
  // chunk embeds tokens), the one leaving it (sent, unless the chunk ends in the loss), and the
  // gradient: of the output before backward (received), of the input after it (sent).
  Tensor input(int slot) const { return residual_[slot].front(); }
  Tensor output(int slot) const { return residual_[slot].back(); }
  Tensor grad(int slot) const { return grad_[slot]; }
  // i32 [micro_batch * local rows of each sequence] of a slot, on the device: the
  // micro-batch's token ids (embedding chunk) and targets (loss chunk), written by load() or
  // by the caller before forward (core/host_io.hpp). Empty for a chunk that does not read them.
  Tensor tokens(int slot) const { return tokens_[slot]; }
  Tensor targets(int slot) const { return targets_[slot]; }
  // Every chunk (not only the embedding one) is given each micro-batch's token ids and targets
  // before its forward ([micro_batch * seq] each, host memory, whole sequences): it keeps its
  // rows of them (context parallelism: its part of each sequence) and, with document attention,
  // derives where each document starts. Megatron-LM's reset-attention-mask and
  // reset-position-ids: the end id belongs to the document it ends, the next row starts a
  // document at position 0.
  bool document_attention() const { return spec_.document_end_id >= 0; }
  void load(int slot, const std::int32_t* tokens, const std::int32_t* targets);

  // One micro-batch through the chunk. The embedding chunk reads tokens(slot); with `score` the
  // loss chunk scores targets(slot) and adds the sum of token losses to loss_sum(). With
  // `training` the loss chunk also runs the head's backward, scaled by grad_scale, so backward()
  // can follow. Without `score` (generation) the chunk only computes its output.
  void forward(int slot, bool training, double grad_scale, bool score = true);
  // Backward of the micro-batch in `slot`: from the loss (loss chunk) or from grad(slot); leaves
  // dL/d(input) in grad(slot). With last_micro_batch, grads_final is told as each layer's
  // parameter gradients become final for the step.
  void backward(int slot, bool last_micro_batch);
  // Generation with a key/value cache (a whole model on one rank, one sequence): rows
  // [first, first + count) of the slot (their tokens in tokens(slot)) through every layer into
  // the same rows of output(slot), after rows 0..first-1 went through forward or extend: their
  // keys and values are still in the blocks' saved activations. Equals forward's rows, at the
  // cost of `count` rows: first 0 runs a prompt, later calls add one token at a time.
  void extend(int slot, std::int64_t first, std::int64_t count);
  // Loss chunk: f64 [1] on the device, the token losses added up since zero_loss(). The host
  // reads it once per step (read_scalar).
  Tensor loss_sum() const;
  void zero_loss();

  // Mixture of experts: each MoE block's losses and expert loads since the last reset, in
  // block order (empty for a dense model).
  std::vector<MoeStats> moe_stats() const;
  void reset_moe_stats();
  // Auxiliary-loss-free balancing (docs/moe.md, "DeepSeek-style routing"): each of this
  // chunk's MoE blocks takes its layer's row of `bias` ([model layers, experts], the whole
  // model's table); nothing without the bias.
  void set_moe_router_bias(const std::vector<float>& bias);

  // Told which parameter units forward and backward use, and when gradients are final.
  void set_observer(UnitObserver* observer) { observer_ = observer; }
  // The same for the expert store's units (expert parallelism).
  void set_expert_observer(UnitObserver* observer) { expert_observer_ = observer; }
  // Where the grid layers record their collectives and GEMMs during a traced step.
  void set_tracer(Tracer* tracer) { ctx_.tracer = tracer; }

 protected:
  LmHead& head() { return *head_; }

 private:
  void acquire(int unit, bool grads) const {
    if (observer_) observer_->acquire(unit, grads);
  }
  void release(int unit) const {
    if (observer_) observer_->release(unit);
  }
  void grads_final(int unit, bool last) const {
    if (observer_) observer_->grads_final(unit, last);
  }
  // Block i's unit, and with expert parallelism its experts' unit (unit i of the expert store).
  void acquire_block(std::size_t i, bool grads) const;
  void release_block(std::size_t i) const;
  void block_grads_final(std::size_t i, bool last) const;

  // The slot's positions of this rank's rows (sequence parallelism: its slice), or empty.
  Tensor local_positions(int slot) const;
  // Rows of each sequence this rank holds (all of them without context parallelism), and of
  // a micro-batch.
  std::int64_t local_seq() const { return ctx_.cp.local_seq(seq_); }
  std::int64_t rows() const { return batch_ * local_seq(); }

  ModelConfig config_;
  ChunkSpec spec_;
  std::int64_t batch_, seq_;
  ParamStore params_;
  std::unique_ptr<ParamStore> expert_params_;
  LayerContext ctx_;
  std::unique_ptr<Embedding> embedding_;
  // BLOOM's LayerNorm right after the embedding, and per slot what its backward needs: the
  // embedding before the norm and the norm's statistics ([local rows, d], [local rows] x 2).
  std::unique_ptr<LayerNorm> embedding_norm_;
  struct EmbeddingNormSaved {
    Tensor raw, mean, rstd;
  };
  std::vector<EmbeddingNormSaved> embedding_saved_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<LmHead> head_;
  int embedding_unit_ = -1, first_block_unit_ = 0, head_unit_ = -1;
  std::vector<std::vector<Tensor>> residual_;  // [slot][i]: input of block i; back(): output
  std::vector<Tensor> grad_;                   // [slot]
  std::vector<Tensor> tokens_, targets_;       // [slot]
  // Document attention, i32 [micro_batch * seq] per slot: each row's document start (chunks
  // with blocks); with it or context parallelism, i32 [rows()]: the position of each of this
  // rank's rows (with learned positions); and their host staging.
  std::vector<Tensor> doc_start_, positions_;
  std::vector<Tensor> rope_rows_;  // [slot], context parallelism's ring with RoPE
  std::vector<std::int32_t> host_doc_start_, host_positions_, host_rows_, host_rope_rows_;
  std::unique_ptr<ActivationPool> own_pool_;  // without a shared pool
  BlockWorkspace workspace_;
  Buffer workspace_storage_;
  Buffer batch_storage_;  // tokens_ and targets_
  UnitObserver* observer_ = nullptr;
  UnitObserver* expert_observer_ = nullptr;
  // Per block, its unit in the expert store (-1: a dense block, which has no experts:
  // docs/moe.md, "Dense blocks").
  std::vector<int> expert_unit_;
};

}  // namespace kintsugi
