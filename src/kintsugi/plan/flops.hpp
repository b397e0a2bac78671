#pragma once
// The arithmetic of cost, in one place (docs/design.md principle 7): parameter counts and FLOPs
// per token. The training loop's TFLOP/s and MFU, the benchmarks and the planner all use these:
// the cost model takes a block's and the head's FLOPs and a block's parameters from here, and
// memory.hpp the qkv width. A block's parameters are the sums of its inventory
// (model/block_inventory.hpp), the layers the model itself builds. The one copy elsewhere is parallel/stage_partition.cpp's GPT-block
// weighting, which sits below plan/ in the layers and is the runtime's own partition.
//
// Model FLOPs per token (Megatron-LM, Narayanan et al. 2021, eq. 3 divided by tokens):
//   6 * N_matmul + 12 * n_layer * seq * d_model
// where N_matmul counts the parameters that take part in matrix multiplies: per layer the query
// and output projections (2 d^2), keys and values (2 d x kv_heads x head_dim: 2 d^2 without
// grouped-query attention) and the MLP (2 d d_ff, or 3 d d_ff for SwiGLU); 12 d^2 for a GPT-2
// layer. Plus the LM head (vocab x d, real vocabulary, not the padding). The factor 6 is forward (2) plus backward (4); the second term
// is the attention score and value products, QK^T and PV, counted in full (not halved for
// causality, as is the convention). With a sliding window (model.sliding_window) the seq in it
// becomes attended_keys: the full count scaled by the share of the causal pairs the window
// keeps. Embedding lookups, norms and biases are not counted, but for Qwen3's q_norm and k_norm,
// which the backend counts as an attention op (14 FLOPs per query and key element and token: 4
// forward, 10 backward; a step's counted FLOPs equal these, test_model_families.cpp).
// Hardware FLOPs add what recomputation repeats.
#include <cstdint>

#include "kintsugi/core/attended_pairs.hpp"  // attended_pairs, attended_keys: the backend's too
#include "kintsugi/model/config.hpp"

namespace kintsugi {

// Output features of the fused qkv projection: the queries plus a key and a value per kv head
// (3 d_model without grouped-query attention).
std::int64_t qkv_width(const ModelConfig& c);
// Elements of one norm: RMSNorm's weight, or LayerNorm's weight and bias.
std::int64_t norm_parameters(const ModelConfig& c);
// One block's parameters by what tensor parallelism does with them: `split` are the matrices
// (N_matmul's share of the block) and the biases of the column-parallel layers (qkv, MLP up), of
// which each of t ranks holds 1/t; `replicated` are the two norms and the biases added after the
// row-parallel layers (attention output, MLP down), which every rank holds whole, and a mixture
// of experts' matrices (replicated over tp: model/moe_layer.hpp).
struct BlockParameters {
  double split = 0, replicated = 0;
  double total() const { return split + replicated; }
};
// Block `index`'s (a MoE block's or a dense one's: docs/moe.md, "Dense blocks").
BlockParameters block_parameters(const ModelConfig& c, int index = 0);
// Every trainable element (real vocabulary rows, not padding).
std::int64_t parameter_count(const ModelConfig& c);
// The same in a double: exact below 2^53, and no overflow for any shape, however absurd (a
// config is measured with it before it is refused: train/model_fit.hpp).
double parameter_count_double(const ModelConfig& c);
// A mixture of experts' parameters one token uses (docs/moe.md): parameter_count less the
// experts it is not routed to (model.moe_experts - model.moe_top_k per MoE layer); the same as
// parameter_count for a dense model.
double active_parameter_count(const ModelConfig& c);
// Parameters that take part in matrix multiplies (N_matmul above; with a mixture of experts,
// the active ones).
std::int64_t matmul_parameter_count(const ModelConfig& c);
// Model FLOPs for one token at context length seq (forward + backward): n_layer blocks and the
// LM head, the two functions below.
double model_flops_per_token(const ModelConfig& c, std::int64_t seq);
// Hardware FLOPs: model FLOPs plus what recomputation repeats: the attention score and value
// products (selective, 4 n_layer seq d_model per token) or every block's forward (full:
// 2 x 12 n_layer d_model^2 + 4 n_layer seq d_model for GPT-2 blocks). HFU uses these.
double hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective, bool full);
// The two parts of those, per token: one block (its matrices and the attention products, with
// what recomputation repeats of its forward) and the LM head (6 x vocab x d_model; recomputation
// never repeats it). hardware_flops_per_token = the sum of the blocks' + head (n_layer x block
// when the blocks are all of one kind).
double block_hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective,
                                      bool full, int index = 0);
double lm_head_flops_per_token(const ModelConfig& c);
// The attention core of one layer over `sequences` sequences of `seq` tokens, `heads` query
// heads of `head_dim`: QK^T and PV, forward (2 x 2 s^2 hd per head) and backward (twice that),
// over the full s x s: 12 x sequences x heads x seq^2 x head_dim; with a sliding window one s
// is attended_keys(seq, window). Per token and layer that is the 12 seq d_model of
// model_flops_per_token; a measured attention rate (ClusterSpec::attention_tflops) divides this
// count.
double attention_core_flops(std::int64_t sequences, std::int64_t seq, std::int64_t heads,
                            std::int64_t head_dim, std::int64_t window = 0);

}  // namespace kintsugi
