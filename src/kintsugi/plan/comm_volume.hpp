#pragma once
// Bytes each rank sends per optimizer step, per group and collective, for a layout: the
// communication half of the cost model (docs/design.md principle 7). Tests hold the communicator's
// byte counters to these numbers; the planner turns them into time.
//
// Ring algorithms over n ranks and a buffer of N bytes send, per rank:
//   all-reduce 2(n-1)/n N,   reduce-scatter (n-1)/n N,   all-gather (n-1)/n N
// (all-gather's N is the gathered size, reduce-scatter's the input size).
//
// Per micro-batch of R token rows, with tensor parallelism over t ranks (no sequence
// parallelism): the embedding's output and each block's two halves are all-reduced in forward
// (1 + 2L all-reduces of R x d), the gradients entering each block's two halves and the LM
// head in backward (2L + 1); the vocabulary-parallel loss all-reduces 3 numbers per row.
// Sequence parallelism turns each all-reduce into an all-gather + reduce-scatter pair of the
// same total volume, gathers each block's two norm outputs again in backward (2L all-gathers:
// forward keeps only this rank's rows of them) and adds one all-reduce of the replicated
// parameters' partial gradients per step. Replicated parameters that each tensor-parallel rank
// applies to its own heads (Qwen3's q_norm and k_norm) have partial gradients with or without
// sequence parallelism: one all-reduce of them per step (with sequence parallelism, together
// with the norms'). Data parallelism all-reduces the gradient buffer once per step. Pipeline
// parallelism sends one activation (R/t x d with sequence parallelism) per stage boundary and
// micro-batch each way, and sums the two copies of the tied embedding once per step.
//
// 3D tensor parallelism on a Gx x Gy x Gz grid (docs/parallelism.md, "3D tensor parallelism";
// Singh et al., arXiv 2305.13525), per micro-batch with R = micro_batch seq / Gz rows per rank
// and per block, whose weight blocks W_qkv, W_proj, W_fc (SwiGLU: W_gate and W_up), W_fc2 together
// hold B = (qkv + d + (k + 1) d_ff) d / (Gx Gy) elements (k = 2 with SwiGLU, else 1):
//   grid_z   all-gather of every block before its forward and again before its backward
//            (2 B parameter elements), reduce-scatter of its gradient (B gradient elements)
//   grid_x   forward: all-reduce of the entry layers' outputs, R (qkv + k d_ff) / Gy, and
//            all-gather of the exit layers' output slices back to whole rows (2 R d gathered);
//            backward: all-reduce of the exit layers' input gradients R (d + d_ff) / Gy and
//            all-gather of the entry layers' input gradients (2 R d gathered)
//   grid_y   forward: all-reduce of the exit layers' outputs (2 R d / Gx); backward: of the entry
//            layers' input gradients (2 R d / Gx)
//   grid_xy  the vocabulary-parallel embedding and loss over the Gx Gy plane, as 1D tensor
//            parallelism's embedding, head and loss terms over R rows
// and once per step grid_z all-reduces the gradients of everything replicated over z (the
// parameters other than the weight blocks). Full recomputation repeats the forward terms.
#include <cstdint>
#include <vector>
#include <map>
#include <string>

#include "kintsugi/core/parallel_layout.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct StepShape {
  std::int64_t micro_batch = 1, seq = 1;
  std::int64_t micro_batches = 1;       // per data-parallel rank per step
  std::int64_t grad_elements = 0;       // elements of a rank's flat gradient buffers
  std::int64_t sp_grad_elements = 0;    // replicated parameters with partial gradients (sp)
  std::int64_t head_grad_elements = 0;  // replicated, partial over the heads (any tp: qk norms)
  std::int64_t depth_grad_elements = 0;  // 3D tensor parallelism: replicated over the grid's z
  std::int64_t element_bytes = 4;             // a gradient element
  std::int64_t activation_element_bytes = 4;  // an activation element (the compute type)
  std::int64_t statistic_bytes = 4;           // loss statistics (f32; f64 in checks)
  // What the rank holds (pipeline parallelism holds a part): blocks (-1: all), embeddings, head.
  std::int64_t blocks = -1;
  // Of those, the MoE blocks (docs/moe.md, "Dense blocks"; -1: as many as blocks, or the
  // model's MoE blocks when blocks is -1), whose layers exchange rows under expert parallelism.
  std::int64_t moe_blocks = -1;
  bool embedding = true, head = true;
  // Activation-sized tensors the rank sends to neighbouring stages per micro-batch (outputs
  // forward, input gradients backward), and elements of the tied token table it sums with the
  // other end of the pipeline once per step.
  std::int64_t pipeline_sends = 0;
  std::int64_t tied_embedding_elements = 0;
  // ZeRO: the bytes of a parameter element, and how the parameter units are gathered under
  // stage 3 (embeddings and head once per micro-batch, blocks twice: before forward and before
  // backward). The stage, the ranks the state is sharded over and the replicas of each shard
  // are the layout's (ParallelLayout::zero, shards(), replicas()), which step_comm_bytes takes.
  std::int64_t param_element_bytes = 4;
  std::int64_t gathered_once_elements = 0, gathered_twice_elements = 0;
  // Full activation recomputation reruns each block's forward, and its two tensor-parallel
  // exits, in backward.
  bool recompute_full = false;
  // Selective recomputation reruns the attention core in backward (with context parallelism's
  // ring: its passes of keys and values around the ring too).
  bool recompute_selective = false;
  // Expert parallelism: the elements of the rank's expert stores (reduced, sharded and under
  // ZeRO-3 gathered twice per micro-batch over the dp / ep ranks, group "edp"), and the routed
  // rows the rank sends to and receives from the other ep ranks per step (-1: balanced routing,
  // (ep - 1) / ep of each micro-batch's N top_k rows each way and layer).
  std::int64_t expert_grad_elements = 0, expert_gathered_elements = 0;
  double expert_rows_sent = -1, expert_rows_received = -1;
};

// Expert parallelism's all-to-all bytes one rank sends in a step (docs/moe.md, "The bytes"):
// per MoE layer forward (`forwards`: layers x micro-batches of the step, not counting full
// recomputation's reruns) the row counts of the experts of each other ep rank, (ep - 1) x
// experts / ep i32; the rows it sends, S (its token rows' choices of other ranks' experts),
// and those it receives, R: forward sends S rows to the experts and returns R outputs,
// backward sends S output gradients and returns R input gradients, each a row of d_model
// elements of `element_bytes`; full recomputation reruns the forward's counts and rows.
//   bytes = (1 + r) forwards (ep - 1) E / ep 4 + (2 + r) (S + R) d_model element_bytes
// with r = 1 under full recomputation, else 0.
double expert_all_to_all_bytes(const ModelConfig& model, const ParallelLayout& layout,
                               double forwards, double rows_sent, double rows_received,
                               std::int64_t element_bytes, bool recompute_full);

double ring_all_reduce_bytes(double bytes, std::int64_t ranks);
double ring_reduce_scatter_bytes(double bytes, std::int64_t ranks);  // bytes: the input
double ring_all_gather_bytes(double bytes, std::int64_t ranks);      // bytes: the output

// The layout's tp, dp, cp, sequence parallelism and tensor grid (ZeRO comes as `shape`'s share)
// -> "tp.all_reduce", "tp.all_gather", "tp.reduce_scatter", "dp.all_reduce" (with context
// parallelism "dp_cp.*" for every data-parallel term, and "cp.all_to_all" or with the ring
// exchange "cp.send"), "pp.send",
// "embedding.all_reduce", and under ZeRO "dp.reduce_scatter", "dp.all_gather" (or
// "shard.*" and "replica.all_reduce" with hybrid sharding) -> bytes sent by one rank in one
// optimizer step (not counting the handful of scalars for the loss and the norm).
//
// ZeRO moves, per step: stage 1 reduce-scatters the gradient and all-gathers the updated
// weights (as much as one all-reduce); stage 2 reduce-scatters every micro-batch's gradient;
// stage 3 also all-gathers each layer's weights before its forward and before its backward
// (with one micro-batch: 1.5 all-reduces). Hybrid sharding adds an all-reduce of the gradient
// shard across replicas. Expert parallelism moves the experts' share of those terms to group
// "edp" (dp / ep ranks) and adds "ep.all_to_all" (expert_all_to_all_bytes).
std::map<std::string, double> step_comm_bytes(const ModelConfig& model,
                                              const ParallelLayout& layout,
                                              const StepShape& shape);

}  // namespace kintsugi
