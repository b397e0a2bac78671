#include "kintsugi/comm/grid_groups.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

GridCoords grid_coords(const GridShape& g, int t) {
  KINTSUGI_ASSERT(t >= 0 && t < g.size());
  return {t % g.x, t / g.x % g.y, t / (g.x * g.y)};
}

int grid_rank(const GridShape& g, const GridCoords& c) { return c.x + g.x * (c.y + g.y * c.z); }

std::unique_ptr<TensorGrid> TensorGrid::of(Communicator& tp, const ParallelLayout& layout) {
  if (!layout.has_grid()) return nullptr;
  const auto& g = layout.tensor_grid;  // its shape agrees with tp: ParallelLayout::problem
  return std::make_unique<TensorGrid>(
      tp, GridShape{static_cast<int>(g[0]), static_cast<int>(g[1]), static_cast<int>(g[2])},
      layout.tensor_grid_overlap);
}

TensorGrid::TensorGrid(Communicator& tp, GridShape g, bool overlap)
    : shape_(g), overlap_(overlap) {
  KINTSUGI_ASSERT(tp.size() == g.size());
  coords_ = grid_coords(g, tp.rank());
  const GridCoords c = coords_;
  // Color each group by the coordinates it does not vary (as Topology does), key by the ones
  // it does.
  x_ = tp.split(grid_rank(g, {0, c.y, c.z}), c.x, "grid_x");
  y_ = tp.split(grid_rank(g, {c.x, 0, c.z}), c.y, "grid_y");
  z_ = tp.split(grid_rank(g, {c.x, c.y, 0}), c.z, "grid_z");
  plane_ = tp.split(c.z, c.x + g.x * c.y, "grid_xy");
}

}  // namespace kintsugi
