#pragma once
// One pre-norm transformer block, for every family (model/config.hpp):
//   mid = x + proj(attention(qkv(ln1(x))))
//   y   = mid + fc2(gelu(fc(ln2(mid))))               GPT-2, BLOOM
//   y   = mid + fc2(silu(fc(ln2(mid))) * up(ln2(mid)))  Llama (fc is SwiGLU's gate)
// Llama's norms are RMSNorms, its linear layers have no biases, its queries and keys are rotated
// (RoPE) between qkv and attention, and its attention may group query heads around fewer
// key/value heads; BLOOM's attention adds ALiBi biases.
// split Megatron-style across tensor-parallel ranks: qkv and fc are column-parallel (each rank
// computes its heads and its slice of the MLP), proj and fc2 row-parallel, so a block needs one
// all-reduce after each half in forward and one before each half in backward. With sequence
// parallelism the norms and residual adds work on a slice of the token rows, and those
// all-reduces become all-gathers and reduce-scatters (comm/tensor_parallel.hpp).
//
// Forward saves, per micro-batch slot, what backward needs; backward turns the gradient of the
// block's output (held in the residual-gradient buffer) into the gradient of its input, in
// place, and writes the parameter gradients.
#include <array>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/model/activation_pool.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/grid_linear.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

// Activation recomputation (Korthikanti et al.): what a block keeps from forward to backward.
//   none       everything backward needs
//   selective  all but the attention core's output and log-sum-exp, recomputed from qkv
//   full       nothing but the block's input (kept by the chunk); backward reruns the forward
enum class Recompute : std::uint8_t { none, selective, full };
template <>
struct EnumNames<Recompute> {
  static constexpr std::array values = {std::pair{Recompute::none, "none"},
                                        std::pair{Recompute::selective, "selective"},
                                        std::pair{Recompute::full, "full"}};
};

// The tensors a block's forward produces for its backward, for one micro-batch.
// (Means stay empty with RMSNorm; up is SwiGLU's up projection, empty for a GELU MLP; qkv holds
// the rotated queries and keys with RoPE.)
// With sequence parallelism ln1 and ln2 hold this rank's token rows only, as Megatron-LM keeps
// them (Korthikanti et al.): the column-parallel layers they feed see all rows, gathered into
// the workspace in forward and gathered again in backward for the weight gradients.
struct BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, attn, lse;
  Tensor mid, ln2, ln2_mean, ln2_rstd, fc, up, act;
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
  BlockActivations recomputed;  // recompute modes: the activations not kept per micro-batch
  Tensor recomputed_output;     // full recompute: where the rerun forward writes y
  GridWorkspace grid;           // 3D tensor parallelism only
};

class TransformerBlock {
 public:
  TransformerBlock(LayerContext& ctx, const ModelConfig& config, int index);

  // Storage in every slot of `pool` (segment `segment`) for a micro-batch of [batch, seq]
  // tokens, keeping what `recompute` says; the rest lives in the shared workspace.
  void allocate_activations(ActivationPool& pool, const std::string& segment, std::int64_t batch,
                            std::int64_t seq, Recompute recompute, const BlockWorkspace& ws);
  static void layout_workspace(Carver& c, const LayerContext& ctx, const ModelConfig& config,
                               std::int64_t batch, std::int64_t seq, Recompute recompute,
                               BlockWorkspace& ws);
  // After the workspace is allocated: what it holds from the start (3D tensor parallelism's
  // row indices).
  static void fill_workspace(const LayerContext& ctx, std::int64_t rows, const BlockWorkspace& ws);

  // x, y: [local rows, d] (the residual stream).
  void forward(int slot, const Tensor& x, const Tensor& y, const BlockWorkspace& ws);
  // d_residual: in dL/dy, out dL/dx.
  void backward(int slot, const Tensor& x, const Tensor& d_residual, const BlockWorkspace& ws);
  // Generation with a key/value cache (one sequence, one rank, every activation kept): rows
  // [first, first + count) of x through the block into the same rows of y, given that rows
  // 0..first-1 of this slot already went through forward or extend: their keys and values are
  // the saved qkv's. first 0 runs a prompt; later ones add tokens. Equals forward's rows.
  void extend(int slot, const Tensor& x, const Tensor& y, std::int64_t first, std::int64_t count);
  // Document attention: the slot's i32 [batch * seq] document starts (AttentionShape::doc_start),
  // which the caller fills before each forward.
  void set_documents(int slot, const Tensor& doc_start);

 private:
  // 3D tensor parallelism (ctx.grid): the same block with grid layers (model/grid_linear.hpp).
  void forward_grid(int slot, const Tensor& x, const Tensor& y, const BlockWorkspace& ws);
  void backward_grid(int slot, const Tensor& x, const Tensor& d_residual, const BlockWorkspace& ws);

  LayerContext& ctx_;
  ModelConfig config_;
  // Each linear layer is a Linear (1D tensor parallelism or none) or, with a grid, a GridLinear.
  LayerNorm ln1_;
  std::optional<Linear> qkv_;
  std::optional<GridLinear> grid_qkv_;
  std::optional<Linear> proj_;
  std::optional<GridLinear> grid_proj_;
  std::optional<LayerNorm> ln2_;  // constructed after attention's layers: registration order
  std::optional<Linear> fc_;
  std::optional<GridLinear> grid_fc_;
  std::unique_ptr<Linear> up_;  // SwiGLU's up projection (Llama)
  std::optional<GridLinear> grid_up_;
  std::optional<Linear> fc2_;
  std::optional<GridLinear> grid_fc2_;
  // A norm's output over all token rows: the saved tensor itself, or with sequence
  // parallelism the workspace it is gathered into.
  const Tensor& full_rows(const Tensor& local, const BlockWorkspace& ws) const;

  // The attention shape of a slot's micro-batch: this rank's heads, and its document starts.
  AttentionShape shape(int slot) const {
    AttentionShape s = shape_;
    if (!doc_start_.empty()) s.doc_start = doc_start_[slot];
    return s;
  }

  AttentionShape shape_;  // this rank's heads
  std::vector<const std::int32_t*> doc_start_;  // [slot], with document attention
  Recompute recompute_ = Recompute::none;
  std::vector<BlockActivations> saved_;
};

}  // namespace kintsugi
