#pragma once
// What a transformer block (model/transformer_block.hpp) keeps per micro-batch, and the scratch
// all blocks of a chunk share: the tensors the block writes itself and the ones its split
// linear layers (model/block_half.hpp) communicate through.
#include "kintsugi/model/context_parallel.hpp"
#include "kintsugi/model/grid_linear.hpp"

namespace kintsugi {

// The tensors a block's forward produces for its backward, for one micro-batch.
// (Means stay empty with RMSNorm; up is SwiGLU's up projection, empty for a GELU MLP; qkv holds
// the rotated queries and keys with RoPE; with Qwen3's q_norm and k_norm, qkv_pre holds qkv
// before the norm and qk_rstd each query and key head's rstd, empty otherwise.)
// With sequence parallelism ln1 and ln2 hold this rank's token rows only, as Megatron-LM keeps
// them (Korthikanti et al.): the column-parallel layers they feed see all rows, gathered into
// the workspace in forward and gathered again in backward for the weight gradients.
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, attn, lse;
  Tensor mid, ln2, ln2_mean, ln2_rstd, fc, up, act;
  Tensor qkv_pre, qk_rstd;
  // A mixture-of-experts MLP (model/moe_layer.hpp) instead of fc, up and act: the router's
  // probabilities and log-sum-exp, each row's experts and gates, the routed rows' order by
  // expert and its inverse, the permuted input, each routed row's SwiGLU (gate, up, act) and
  // output; and the shared expert's SwiGLU, output and gate logit.
  Tensor moe_probs, moe_lse, moe_experts, moe_gates, moe_order, moe_position;
  Tensor moe_xp, moe_gate, moe_up, moe_act, moe_yp;
  Tensor moe_xr;  // expert parallelism: the rows this rank's experts received, by expert
  Tensor shared_gate, shared_up, shared_act, shared_out, shared_logit;
};

// Activation-gradient buffers shared by all blocks of a chunk (one block runs at a time),
// sized for one micro-batch of `rows` token rows, and the one micro-batch of activations that
// recomputation works in.
struct BlockWorkspace {
  Tensor full;         // [rows, d]: partial outputs and gathered gradients (sequence parallel)
  Tensor norm_full;    // [rows, d]: a norm's output gathered over the rows (sequence parallel)
  Tensor d_norm_full;  // [rows, d]: gradient at a norm's output, partial over tp ranks
  Tensor d_norm;       // [local rows, d]: the same, reduced (aliases d_norm_full without sp)
  Tensor d_qkv;        // [rows, (heads + 2 kv heads) head_dim / tp]
  Tensor d_attn;       // [rows, d / tp]
  Tensor d_fc;         // [rows, d_ff / tp]
  Tensor d_up;         // [rows, d_ff / tp] (SwiGLU only)
  // Context parallelism's exchange around attention (model/context_parallel.hpp), empty
  // without it: the all-to-all's two buffers, and backward's attention output, its gradient
  // and the qkv gradient with every row and 1/cp of the heads.
  Tensor cp_send, cp_recv;      // [rows * (heads + 2 kv heads) head_dim / tp]
  Tensor cp_out, cp_dout;       // [rows, heads head_dim / tp] elements, as [cp rows, 1/cp heads]
  Tensor cp_dqkv;               // [rows, (heads + 2 kv heads) head_dim / tp] elements, likewise
  // The ring exchange instead (ring_attention.cpp): two key/value chunks and two accumulators
  // of their gradients, each [rows, 2 kv heads head_dim / tp].
  ContextParallel::RingBuffers cp_ring;
  // Mixture of experts: the router's logits and their gradient, the experts' row counts, and
  // the gradients of the routed rows, their SwiGLU, the gates and the shared expert.
  Tensor moe_logits, moe_d_logits, moe_counts;
  Tensor moe_d_rows;                 // [rows K, d]: the routed outputs', then inputs' gradient
  Tensor moe_d_act, moe_d_up;        // [rows K, expert hidden]
  Tensor moe_d_gates;                // [rows, K]
  // Sequence parallelism (each tp rank's own rows routed with the whole micro-batch's,
  // model/moe_layer.hpp): the whole micro-batch's dispatch [rows K], and this rank's gates'
  // gradient [local rows, K] before it is gathered into moe_d_gates.
  Tensor moe_order_all, moe_position_all, moe_d_gates_local;
  // Both sequence and context parallelism: a cp rank's rows of the logits and the gates'
  // gradient, gathered over tp before they are gathered over cp.
  Tensor moe_logits_cp, moe_d_gates_cp;
  // Expert parallelism: the counts received, the rows received (then the experts' outputs
  // sent back, and in backward the gradients), the experts' outputs by expert, and the
  // permutation between by-source and by-expert order and its inverse.
  Tensor moe_recv_counts, moe_recv, moe_yr, moe_perm, moe_inverse;
  Tensor shared_d_out, shared_d_act, shared_d_up, shared_d_logit;
  BlockActivations recomputed;  // recompute modes: the activations not kept per micro-batch
  Tensor recomputed_output;     // full recompute: where the rerun forward writes y
  GridWorkspace grid;           // 3D tensor parallelism only
};

}  // namespace kintsugi
