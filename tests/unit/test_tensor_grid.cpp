// 3D tensor parallelism's pure parts: the grid's rank arithmetic, the layout rules of a grid,
// the initial values of a weight block split in both dimensions, and the communication formula
// of the degenerate 1 x N x 1 grid against Megatron's 1D layout (docs/parallelism.md).
#include <gtest/gtest.h>

#include <vector>

#include "kintsugi/comm/grid_groups.hpp"
#include "kintsugi/model/param_store.hpp"
#include "kintsugi/parallel/layout_rules.hpp"
#include "kintsugi/plan/comm_volume.hpp"

namespace kintsugi {
namespace {

TEST(TensorGrid, RanksAndCoordinatesRoundTripWithXFastest) {
  for (GridShape g : {GridShape{2, 2, 2}, GridShape{1, 4, 1}, GridShape{3, 1, 2}}) {
    for (int t = 0; t < g.size(); ++t) {
      const GridCoords c = grid_coords(g, t);
      EXPECT_LT(c.x, g.x);
      EXPECT_LT(c.y, g.y);
      EXPECT_LT(c.z, g.z);
      EXPECT_EQ(grid_rank(g, c), t);
    }
  }
  const GridCoords c = grid_coords({2, 3, 2}, 7);  // 7 = 1 + 2 (0 + 3 * 1)
  EXPECT_EQ(c.x, 1);
  EXPECT_EQ(c.y, 0);
  EXPECT_EQ(c.z, 1);
}

LayoutSpec grid_layout(std::int64_t x, std::int64_t y, std::int64_t z) {
  return {.parallel = {.tp = x * y * z, .tensor_grid = {x, y, z}},
          .global_batch = 8,
          .micro_batch = 2};
}

TEST(TensorGrid, LayoutRules) {
  const ModelConfig m = model_preset("gpt-tiny");  // 4 heads, d_model 128
  EXPECT_EQ(layout_problem(m, grid_layout(2, 2, 2)), "");
  EXPECT_EQ(layout_problem(m, grid_layout(1, 4, 1)), "");
  // x splits only the model width: 8 x ranks need no more heads than 4.
  EXPECT_EQ(layout_problem(m, grid_layout(8, 1, 1)), "");
  EXPECT_NE(layout_problem(m, grid_layout(1, 8, 1)).find("must be divisible by the grid's y"),
            std::string::npos);
  EXPECT_NE(layout_problem(m, grid_layout(1, 1, 4)).find("train.micro_batch = 2 must be"),
            std::string::npos);
  LayoutSpec l = grid_layout(2, 1, 1);
  l.parallel.tp = 4;
  EXPECT_NE(layout_problem(m, l).find("has 2 ranks but tp = 4"), std::string::npos);
  l = grid_layout(2, 1, 1);
  l.parallel.sequence_parallel = true;
  EXPECT_NE(layout_problem(m, l).find("--sequence-parallel"), std::string::npos);
  // Pipeline stages of grids and ZeRO over the data-parallel ranks are layouts like others.
  l = grid_layout(2, 1, 1);
  l.parallel.pp = 2;
  EXPECT_EQ(layout_problem(m, l), "");
  l = grid_layout(2, 1, 1);
  l.parallel.dp = 2;
  l.global_batch = 8;
  l.parallel.zero = ZeroStage::parameters;
  EXPECT_EQ(layout_problem(m, l), "");
  // Grouped-query attention: y must divide the kv heads too (llama-tiny: 4 heads around 2).
  const ModelConfig llama = model_preset("llama-tiny");
  EXPECT_EQ(layout_problem(llama, grid_layout(2, 2, 1)), "");
  EXPECT_NE(layout_problem(llama, grid_layout(1, 4, 1)).find("key/value heads"),
            std::string::npos);
}

// Element g of a parameter's global tensor is the same number in every layout, also for a grid
// weight's piece: rows [split_begin, +extent) and columns [cols_begin, +cols_extent).
TEST(TensorGrid, BlockPieceDrawsTheSerialElements) {
  const std::int64_t out = 12, in = 8;
  ParamStore whole;
  whole.add({.name = "w", .global_shape = {out, in}, .init = ParamInit::normal, .init_std = 0.02});
  whole.end_unit("u");
  std::vector<float> serial(static_cast<std::size_t>(whole.numel()));
  whole.initial_values(7, 0, whole.numel(), serial.data());
  ParamStore piece;
  piece.add({.name = "w",
             .global_shape = {out, in},
             .init = ParamInit::normal,
             .init_std = 0.02,
             .split_dim = 0,
             .split_begin = 3,
             .split_extent = 6,
             .cols_begin = 4,
             .cols_extent = 4});
  piece.end_unit("u");
  EXPECT_EQ(piece.entry(0).local_shape, (Shape{6, 4}));
  std::vector<float> local(static_cast<std::size_t>(piece.numel()));
  piece.initial_values(7, 0, piece.numel(), local.data());
  for (std::int64_t r = 0; r < 6; ++r)
    for (std::int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(local[r * 4 + c], serial[(3 + r) * in + 4 + c]) << r << "," << c;
}

TEST(TensorGrid, DepthReplicatedParametersAreMarked) {
  ParamStore p;
  p.add({.name = "block", .global_shape = {4, 4}, .split_dim = 0, .split_begin = 0,
         .split_extent = 2, .cols_begin = 0, .cols_extent = 4});
  p.add({.name = "norm", .global_shape = {4}, .init = ParamInit::ones});
  p.end_unit("u");
  p.mark_replicated_over_depth(1);
  EXPECT_FALSE(p.entry(0).spec.depth_partial_grad);
  EXPECT_FALSE(p.entry(0).spec.duplicate);
  EXPECT_TRUE(p.entry(1).spec.depth_partial_grad);
  EXPECT_TRUE(p.entry(1).spec.duplicate);  // z rank 1: z rank 0 counts it
}

// 1 x N x 1 is Megatron's layout: its y all-reduces and the plane's embedding, head and loss
// all-reduces move what --tp N's all-reduces move.
TEST(TensorGrid, OneByNByOneMovesWhatTheOneDimensionalLayoutMoves) {
  const ModelConfig m = model_preset("gpt-tiny");
  const StepShape s{.micro_batch = 2, .seq = 128, .micro_batches = 3, .grad_elements = 1000};
  for (std::int64_t n : {2, 4}) {
    const auto one_d = step_comm_bytes(m, {.tp = n}, s);
    const auto grid = step_comm_bytes(m, {.tp = n, .tensor_grid = {1, n, 1}}, s);
    EXPECT_DOUBLE_EQ(grid.at("grid_y.all_reduce") + grid.at("grid_xy.all_reduce"),
                     one_d.at("tp.all_reduce"));
    EXPECT_EQ(grid.count("grid_x.all_reduce") + grid.count("grid_z.all_gather"), 0u);
  }
}

}  // namespace
}  // namespace kintsugi
