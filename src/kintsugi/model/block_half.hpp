#pragma once
// The linear layers of one half of a transformer block, split across ranks as the layout says,
// and the communication around them: parallelism applied to the block from outside, so that
// the block's forward and backward (model/transformer_block.cpp) are written once.
//
// A half is a norm's output -> entry layers -> a core -> an exit layer -> the residual stream:
//   attention  ln1 -> qkv -> RoPE, attention -> proj
//   MLP        ln2 -> fc (and SwiGLU's up) -> GELU or SwiGLU -> fc2
// The block says what the layers are (HalfSpec: names, shapes, initialisation); an
// implementation says how they are split and what moves between ranks:
//   TensorParallelHalf (model/tensor_parallel_half.hpp)  1D tensor parallelism, Megatron-style:
//       entry layers column-parallel, the exit layer row-parallel, with or without sequence
//       parallelism; on one rank every collective is a no-op, so it is also the plain layer
//   GridHalf (model/grid_half.hpp)  3D tensor parallelism: entry and exit layers of the grid
// make_block_half() chooses once, from the layer context's layout.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kintsugi/model/block_workspace.hpp"
#include "kintsugi/model/carver.hpp"
#include "kintsugi/model/layers.hpp"

namespace kintsugi {

// One linear layer y = x W^T + b, W [out, in], as the model defines it.
struct LinearSpec {
  std::string name;  // the parameters are name + ".weight" and ".bias"
  std::int64_t in = 0, out = 0;
  double init_std = 0;
};

// The linear layers of a half: entry layers read the norm's output (qkv; or fc, SwiGLU's gate,
// and up), the exit layer writes to the residual stream (proj; fc2, SwiGLU's down). Parameters
// are registered in the order entries, exit.
struct HalfSpec {
  enum class Kind { attention, mlp };
  Kind kind = Kind::attention;
  std::vector<LinearSpec> entries;
  LinearSpec exit;
  bool entry_bias = true;  // the entry layers' biases (Qwen2 has them on qkv only)
  bool exit_bias = true;
};

class BlockHalf {
 public:
  virtual ~BlockHalf() = default;

  // Forward.
  // The input the entry layers read, from the norm's output on this rank's rows: the same
  // tensor, or the rows of all ranks gathered (sequence parallelism), or this rank's columns
  // (the grid).
  virtual Tensor enter(const Tensor& norm, const BlockWorkspace& ws) const = 0;
  // Entry layer k: out = in W^T + b, this rank's heads or MLP columns.
  virtual void entry(int k, const Tensor& in, const Tensor& out,
                     const BlockWorkspace& ws) const = 0;
  // Entry layer 0 and the GELU after it: pre = in W^T + b, act = gelu(pre), in one GEMM where
  // the backend fuses it.
  virtual void entry_gelu(const Tensor& in, const Tensor& pre, const Tensor& act,
                          const BlockWorkspace& ws) const = 0;
  // The exit layer: out (this rank's rows of the residual stream) = act W^T + b, reduced over
  // the ranks that hold parts of it.
  virtual void exit(const Tensor& act, const Tensor& out, const BlockWorkspace& ws) const = 0;

  // Backward (one half at a time, exit first).
  // The exit layer's parameter gradients from d_out, the gradient of its output rows; returns
  // the gradient at act (a workspace tensor). `norm` is the half's norm output, which the entry
  // layers' backward needs again (sequence parallelism starts gathering it here).
  virtual Tensor exit_backward(const Tensor& d_out, const Tensor& act, const Tensor& norm,
                               const BlockWorkspace& ws) = 0;
  // The same followed by the GELU's backward: d_pre = gelu'(pre) * (the gradient at act).
  virtual void exit_backward_gelu(const Tensor& d_out, const Tensor& act, const Tensor& pre,
                                  const Tensor& d_pre, const Tensor& norm,
                                  const BlockWorkspace& ws) = 0;
  // The entry layers' parameter gradients from d_outs (one per entry layer, in order); returns
  // the gradient at the norm's output, this rank's rows, reduced (a workspace tensor).
  virtual Tensor entry_backward(const Tensor& norm, std::span<const Tensor> d_outs,
                                const BlockWorkspace& ws) = 0;
  // After the block's last backward step: completes what is still in flight, so that the
  // block's parameter gradients are final.
  virtual void finish_backward(const BlockWorkspace& ws) const = 0;
};

// The half for ctx's layout. `before`: the block's attention half when this is its MLP half
// (the grid gathers a layer's weights while the one before it computes, across halves).
std::unique_ptr<BlockHalf> make_block_half(LayerContext& ctx, const HalfSpec& spec,
                                           BlockHalf* before);

// The scratch the layout's halves need besides the block's own (carved after the block's
// gradient buffers), and what it holds from the start.
void layout_halves_workspace(Carver& c, const LayerContext& ctx, std::span<const HalfSpec> halves,
                             std::int64_t rows, BlockWorkspace& ws);
void fill_halves_workspace(const LayerContext& ctx, std::int64_t rows, const BlockWorkspace& ws);

}  // namespace kintsugi
