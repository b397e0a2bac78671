#pragma once
// A block half under 1D tensor parallelism (model/block_half.hpp), split Megatron-style: the
// entry layers are column-parallel (each rank computes its heads and its slice of the MLP), the
// exit layer row-parallel, so a half needs one all-reduce of the exit layer's output in forward
// and one of the entry layers' input gradient in backward. With sequence parallelism the norms
// and the residual stream hold a slice of the token rows, and those all-reduces become
// all-gathers and reduce-scatters (comm/tensor_parallel.hpp). On one rank nothing moves: this
// is also the plain, unsplit half.
#include <optional>
#include <vector>

#include "kintsugi/model/block_half.hpp"

namespace kintsugi {

class TensorParallelHalf final : public BlockHalf {
 public:
  TensorParallelHalf(LayerContext& ctx, const HalfSpec& spec);

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
  void finish_backward(const BlockWorkspace&) const override {}

 private:
  // The norm's output over all token rows: the tensor itself, or with sequence parallelism the
  // workspace it is gathered into.
  const Tensor& full_rows(const Tensor& norm, const BlockWorkspace& ws) const;
  // The gradient of the exit layer's output over all token rows (sequence parallelism gathers
  // it), after which the norm's rows start being gathered again for the entry layers.
  Tensor begin_exit_backward(const Tensor& d_out, const Tensor& norm, const BlockWorkspace& ws);

  LayerContext& ctx_;
  HalfSpec::Kind kind_;
  std::vector<Linear> entries_;
  std::optional<Linear> exit_;
  CommHandle gather_;  // sequence parallelism: the norm's rows, gathered during exit_backward
};

}  // namespace kintsugi
