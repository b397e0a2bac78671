#pragma once
// One pre-norm transformer block, for every family (model/config.hpp):
//   mid = x + proj(attention(qkv(ln1(x))))
//   y   = mid + fc2(gelu(fc(ln2(mid))))               GPT-2, BLOOM
//   y   = mid + fc2(silu(fc(ln2(mid))) * up(ln2(mid)))  Llama (fc is SwiGLU's gate)
// What a family adds is asked of the config's features: RMSNorm instead of LayerNorm, no
// biases, rotated queries and keys (RoPE) between qkv and attention, grouped-query attention,
// ALiBi biases in attention.
//
// The block says what its layers and saved tensors are (model/block_inventory.hpp); how its linear layers are split across
// ranks, and what moves between them, is applied from outside (model/block_half.hpp: 1D tensor
// parallelism with or without sequence parallelism, plain on one rank, or the 3D grid), so its
// forward and backward are written once for every layout.
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
#include "kintsugi/model/block_half.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/model/block_workspace.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"
#include "kintsugi/model/moe_layer.hpp"
#include "kintsugi/model/rotary_table.hpp"

namespace kintsugi {

class TransformerBlock {
 public:
  // In a MoE block (config.is_moe_block(index)) the MLP half is a MoeLayer whose losses weigh
  // `moe_weights` in the objective.
  TransformerBlock(LayerContext& ctx, const ModelConfig& config, int index,
                   MoeLossWeights moe_weights = {});

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
  // the saved qkv's. first 0 runs a prompt; later ones add tokens. Equals forward's rows: it is
  // forward on a row range.
  void extend(int slot, const Tensor& x, const Tensor& y, std::int64_t first, std::int64_t count,
              const BlockWorkspace& ws);
  // Document attention: the slot's i32 [batch * seq] document starts (AttentionShape::doc_start),
  // which the caller fills before each forward.
  void set_documents(int slot, const Tensor& doc_start);
  // Context parallelism's ring with RoPE: the slot's i32 [batch * local rows] offsets from
  // which RoPE counts each of this rank's rows' positions (AttentionShape::doc_start as RoPE
  // reads it: a row's index less its position), which the caller fills before each forward.
  void set_rope_rows(int slot, const Tensor& rope_rows);
  // Mixture of experts (null without): its layer, to set its gradient scale and read its stats.
  MoeLayer* moe() { return moe_.get(); }

 private:
  // Rows [first, first + count) of a micro-batch (extend), or all of them.
  struct RowRange {
    std::int64_t first = 0, count = -1;
    bool all() const { return count < 0; }
    Tensor of(const Tensor& t) const { return all() || t.empty() ? t : t.rows(first, count); }
  };
  void forward_rows(int slot, const Tensor& x, const Tensor& y, const BlockWorkspace& ws,
                    RowRange rows);
  // RoPE and the attention core on the saved qkv's rows: causal attention over the whole
  // micro-batch into `out`, or for extend a prompt's rows among themselves or new tokens
  // against the cache (into the saved attention output's rows).
  void attend(int slot, RowRange rows, const Tensor& out, const BlockWorkspace& ws);
  // Qwen3: q_norm and k_norm's backward on the qkv gradient (after RoPE's).
  void qk_norm_backward(const BlockActivations& s, const AttentionShape& shape,
                        const Tensor& d_qkv);

  LayerContext& ctx_;
  ModelConfig config_;
  int index_;  // the block's number in the model (its names; MoE or dense)
  RotaryTable rotary_;  // RoPE's angles, scaling applied (rotary_table.hpp)
  LayerNorm ln1_;
  std::unique_ptr<BlockHalf> attention_;  // qkv, proj
  std::optional<LayerNorm> ln2_;  // constructed between the halves: registration order
  std::unique_ptr<BlockHalf> mlp_;        // fc (SwiGLU's gate), up, fc2 (down)
  std::unique_ptr<MoeLayer> moe_;         // instead of mlp_ with a mixture of experts
  bool recomputing_ = false;              // full recomputation's rerun forward
  int q_norm_ = -1, k_norm_ = -1;  // Qwen3's q_norm and k_norm weights (ParamStore indices)

  // The attention shape of a slot's micro-batch: this rank's heads, and its document starts.
  AttentionShape shape(int slot) const {
    AttentionShape s = shape_;
    if (!doc_start_.empty()) s.doc_start = doc_start_[slot];
    return s;
  }

  AttentionShape shape_;  // this rank's heads
  std::vector<const std::int32_t*> doc_start_;  // [slot], with document attention
  std::vector<const std::int32_t*> rope_rows_;  // [slot], the ring with RoPE
  // The ring's shape of this rank's rows (RoPE and qk_norm): seq its rows of each sequence,
  // doc_start the rope rows.
  AttentionShape local_shape(int slot) const;
  Recompute recompute_ = Recompute::none;
  std::vector<BlockActivations> saved_;
};

}  // namespace kintsugi
