#pragma once
// A block half under 3D tensor parallelism (model/block_half.hpp, model/grid_linear.hpp,
// docs/parallelism.md "3D tensor parallelism"): the residual stream, the norms and their outputs
// hold whole rows of this z's token rows; entry layers read the x-rank's slice of the columns,
// exit layers write it, and it is gathered back over x. An entry layer's output (this y's heads
// or MLP columns) is what the core between the layers works on, without moving anything.
//
// With overlap each layer gathers the next one's weights while it computes: the halves of a
// block are linked (the attention half's exit layer runs before the MLP half's first entry in
// forward; the MLP half's first entry before the attention half's exit in backward).
#include <memory>
#include <vector>

#include "kintsugi/model/block_half.hpp"

namespace kintsugi {

class GridHalf final : public BlockHalf {
 public:
  GridHalf(LayerContext& ctx, const HalfSpec& spec, GridHalf* before);

  // The grid layers' scratch for a chunk whose blocks have these halves (the largest layer's
  // gathered block and its gradients, the column slices and their row indices).
  static void layout_workspace(Carver& c, const LayerContext& ctx,
                               std::span<const HalfSpec> halves, std::int64_t rows,
                               GridWorkspace& ws);
  static void fill_workspace(const LayerContext& ctx, std::int64_t rows, const GridWorkspace& ws);

  Tensor enter(const Tensor& norm, const BlockWorkspace& ws) const override;
  void entry(int k, const Tensor& in, const Tensor& out, const BlockWorkspace& ws) const override;
  void entry_gelu(const Tensor& in, const Tensor& pre, const Tensor& act,
                  const BlockWorkspace& ws) const override;
  void exit(const Tensor& act, const Tensor& out, const BlockWorkspace& ws) const override;

  Tensor exit_backward(const Tensor& d_out, const Tensor& act, const Tensor& norm,
                       const BlockWorkspace& ws) override;
  void exit_backward_gelu(const Tensor& d_out, const Tensor& act, const Tensor& pre,
                          const Tensor& d_pre, const Tensor& norm,
                          const BlockWorkspace& ws) override;
  Tensor entry_backward(const Tensor& norm, std::span<const Tensor> d_outs,
                        const BlockWorkspace& ws) override;
  void finish_backward(const BlockWorkspace& ws) const override;

 private:
  GridColumns columns() const { return GridColumns(ctx_.backend, *ctx_.grid); }
  // This x's columns of a whole-row tensor: itself with Gx = 1, else sliced into `part`.
  Tensor slice(const Tensor& full, const Tensor& part, const GridWorkspace& g) const;
  // The layer that runs after entry layer k in forward.
  const GridLinear* after_entry(std::size_t k) const;

  LayerContext& ctx_;
  HalfSpec::Kind kind_;
  std::vector<std::unique_ptr<GridLinear>> entries_;  // stable addresses: the layers are linked
  std::unique_ptr<GridLinear> exit_;
  const GridLinear* forward_next_ = nullptr;   // after the exit layer: the next half's entry
  const GridLinear* backward_next_ = nullptr;  // after entry 0's backward: the half before's exit
};

}  // namespace kintsugi
