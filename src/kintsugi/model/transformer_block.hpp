#pragma once
// One pre-LayerNorm transformer block (GPT-2):
//   mid = x + proj(attention(qkv(ln1(x))))
//   y   = mid + fc2(gelu(fc(ln2(mid))))
// Forward saves, per micro-batch slot, what backward needs; backward turns the gradient of the
// block's output (held in the residual-gradient buffer) into the gradient of its input, in
// place, and writes the parameter gradients.
#include <vector>

#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

// Activation-gradient buffers shared by all blocks of a chunk (only one block runs backward at
// a time). Sized for one micro-batch.
struct BlockWorkspace {
  Tensor d_norm;  // [rows, d]
  Tensor d_qkv;   // [rows, 3d]
  Tensor d_attn;  // [rows, d]
  Tensor d_fc;    // [rows, d_ff]
};

class TransformerBlock {
 public:
  TransformerBlock(LayerContext& ctx, const ModelConfig& config, int index);

  // Storage for `slots` micro-batches in flight, each [batch, seq] tokens.
  void allocate_activations(int slots, std::int64_t batch, std::int64_t seq);
  static void layout_workspace(Carver& c, DType dtype, const ModelConfig& config,
                               std::int64_t rows, BlockWorkspace& ws);

  void forward(int slot, const Tensor& x, const Tensor& y);
  // d_residual: in dL/dy, out dL/dx.
  void backward(int slot, const Tensor& x, const Tensor& d_residual, const BlockWorkspace& ws);

 private:
  struct Saved {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, attn, lse, mid, ln2, ln2_mean, ln2_rstd, fc, act;
  };

  LayerContext& ctx_;
  std::int64_t d_, d_ff_, heads_;
  LayerNorm ln1_;
  Linear qkv_;
  Linear proj_;
  LayerNorm ln2_;
  Linear fc_;
  Linear fc2_;
  AttentionShape shape_;
  std::vector<Saved> saved_;
  std::vector<Buffer> storage_;
};

}  // namespace kintsugi
