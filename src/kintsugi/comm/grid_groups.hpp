#pragma once
// 3D tensor parallelism (Agarwal's 3D matrix multiply as AxoNN uses it: Singh et al., arXiv
// 2305.13525 and 2502.08145; docs/parallelism.md, "3D tensor parallelism"): the G = Gx Gy Gz
// ranks of a tensor-parallel group form a grid, tensor-parallel rank t = x + Gx (y + Gy z).
// A linear layer's weight block is split over x and y (its input dimension over one, its output
// dimension over the other) and sharded further over z; its input's token rows are split over z.
//
// The groups: x (ranks differing only in x), y, z, and the xy plane (the Gx Gy ranks of one z,
// which hold the same token rows: the vocabulary-parallel embedding and loss use it as their 1D
// group). With one rank along a dimension its group has one member and every collective over it
// is skipped.
#include <memory>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/parallel_layout.hpp"

namespace kintsugi {

struct GridShape {
  int x = 1, y = 1, z = 1;
  int size() const { return x * y * z; }
};

struct GridCoords {
  int x = 0, y = 0, z = 0;
};

// Pure arithmetic: tensor-parallel rank <-> grid coordinates.
GridCoords grid_coords(const GridShape& g, int tp_rank);
int grid_rank(const GridShape& g, const GridCoords& c);

class TensorGrid {
 public:
  // Collective over `tp` (size g.size()): splits it into the grid's groups. `overlap`: its
  // layers prefetch weight gathers and overlap backward's reductions with computation
  // (model/grid_linear.hpp; false: each collective blocks where it is issued, the same bits).
  TensorGrid(Communicator& tp, GridShape g, bool overlap = true);
  // The layout's grid over its tensor-parallel group `tp` (collective), null without one.
  static std::unique_ptr<TensorGrid> of(Communicator& tp, const ParallelLayout& layout);
  const GridShape& shape() const { return shape_; }
  bool overlap() const { return overlap_; }
  const GridCoords& coords() const { return coords_; }
  Communicator& x() const { return *x_; }
  Communicator& y() const { return *y_; }
  Communicator& z() const { return *z_; }
  Communicator& plane() const { return *plane_; }

 private:
  GridShape shape_;
  bool overlap_;
  GridCoords coords_;
  std::shared_ptr<Communicator> x_, y_, z_, plane_;
};

}  // namespace kintsugi
