#pragma once
// The memory arithmetic of training, per rank: what the planner predicts and what tests hold
// the runtime's tracked allocations to.
//
// Model state (ZeRO, Rajbhandari et al.), for P parameter elements on the rank sharded over N:
//   parameters  P x pb       (stage 3: / N)       pb = bytes of a parameter element
//   gradients   P x gb       (stages 2-3: / N)    gb = bytes of a gradient element
//   optimizer   P x (4 k + 4 m) / N at stages 1-3, P x (4 k + 4 m) at stage 0
//               (k f32 moments: AdamW's two, Lion's one; m = 1 with mixed precision for the
//               f32 master weights)
// With bf16 weights and bf16 gradients that is the ZeRO paper's 16P, 4P + 12P/N, 2P + 14P/N
// and 16P/N; kintsugi's default keeps gradients in f32 (fp32 gradient accumulation): 18P,
// 6P + 12P/N, 2P + 16P/N, 18P/N. In fp32: 16P, 8P + 8P/N, 4P + 12P/N, 16P/N.
//
// Activations kept per micro-batch by one transformer block of this implementation (b
// sequences of s tokens, hidden h, a heads, MLP width f, tensor parallelism t, element size e):
//   ln1, mid, ln2               3 b s h      (/ t with sequence parallelism: backward gathers
//                                             ln1 and ln2 again for the weight gradients)
//   qkv, attention output       4 b s h / t
//   MLP pre- and post-GELU      2 b s f / t
// times e, plus the block's output in the residual stream (b s h, / t with sp), plus in f32
//   norm statistics             4 b s        (/ t with sequence parallelism)
//   attention log-sum-exp       b s a / t
// For GPT (f = 4h) without parallelism: 16 b s h elements and 4 b s + a b s statistics, i.e.
// s b h (32 + 16/h + 4a/h) bytes in bf16, against Korthikanti et al.'s s b h (34 + 5 a s / h): kintsugi has no dropout (its masks
// are 2 s b h of their 34) and keeps no s x s attention matrices (their 5 a s / h): the
// flash-style kernel recomputes them from the log-sum-exp. With tensor and sequence parallelism
// every term is divided by t: s b h (32/t + 16/(h t) + 4a/(h t)), their s b h (34/t + 5as/(ht)).
// Selective recomputation drops the attention output and log-sum-exp; full recomputation keeps
// only the residual stream.
#include <cstdint>
#include <span>

#include "kintsugi/model/config.hpp"
#include "kintsugi/model/block_inventory.hpp"

namespace kintsugi {

struct StateBytes {
  double parameters = 0, gradients = 0, optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

StateBytes model_state_bytes(double elements, int zero_stage, std::int64_t shards,
                             std::int64_t param_bytes, std::int64_t grad_bytes, bool mixed,
                             int moments = 2);

struct ActivationShape {
  std::int64_t micro_batch = 1, seq = 1;
  std::int64_t tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  std::int64_t element_bytes = 4;    // activations (the compute type)
  std::int64_t statistic_bytes = 4;  // norm statistics and log-sum-exp (f32; f64 in checks)
  // Expert parallelism: the ranks splitting the experts, whose received rows are sized for the
  // worst case (MoeSpec::received_row_factor).
  std::int64_t expert_ranks = 1;
  // Context parallelism: the ranks splitting each sequence (seq is a rank's share); a MoE
  // block's routing holds every one's rows.
  std::int64_t cp = 1;
};

// Bytes one block keeps per micro-batch, its output in the residual stream included.
// Block `index`'s (a MoE block's or a dense one's: docs/moe.md, "Dense blocks").
double block_activation_bytes(const ModelConfig& model, const ActivationShape& shape,
                              int index = 0);
// Blocks [first, first + count) of the model: one model chunk's.
struct BlockRange {
  std::int64_t first = 0, count = 0;
};
// A slot of a pipeline rank's activations, per micro-batch, its chunks built in the order given
// (model/activation_pool.hpp): the blocks (the j-th block of every chunk shares one buffer,
// which a later chunk's larger block replaces while the smaller stays allocated), the chunk's
// input activation, with the head its norm output, statistics and the gradient at it, and with
// the embedding of a family that normalizes it (BLOOM) the embedding before the norm and the
// norm's statistics.
double chunk_activation_bytes(const ModelConfig& model, const ActivationShape& shape,
                              std::span<const BlockRange> chunks, bool head,
                              bool embedding = false);

}  // namespace kintsugi
