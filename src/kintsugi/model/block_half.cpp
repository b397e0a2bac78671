#include "kintsugi/model/block_half.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/grid_half.hpp"
#include "kintsugi/model/tensor_parallel_half.hpp"

namespace kintsugi {

// The one place that turns the layout into the block's layers: a grid when the context has
// one, else 1D tensor parallelism (plain on one rank).
std::unique_ptr<BlockHalf> make_block_half(LayerContext& ctx, const HalfSpec& spec,
                                           BlockHalf* before) {
  if (!ctx.grid) return std::make_unique<TensorParallelHalf>(ctx, spec);
  auto* grid_before = dynamic_cast<GridHalf*>(before);
  KINTSUGI_ASSERT(before == nullptr || grid_before != nullptr);
  return std::make_unique<GridHalf>(ctx, spec, grid_before);
}

void layout_halves_workspace(Carver& c, const LayerContext& ctx, std::span<const HalfSpec> halves,
                             std::int64_t rows, BlockWorkspace& ws) {
  if (ctx.grid) GridHalf::layout_workspace(c, ctx, halves, rows, ws.grid);
}

void fill_halves_workspace(const LayerContext& ctx, std::int64_t rows, const BlockWorkspace& ws) {
  if (ctx.grid) GridHalf::fill_workspace(ctx, rows, ws.grid);
}

}  // namespace kintsugi
