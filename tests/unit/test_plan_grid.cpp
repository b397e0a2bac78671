// 3D tensor parallelism in the planner (docs/planner.md, "3D tensor parallelism in the
// planner"): the bytes it prices are the documented formula's (which the communicator's counters
// are held to), the links its groups sit on, what a rank holds, the overlap, and the search.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/comm_volume.hpp"
#include "kintsugi/plan/cost_model.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/grid_cost.hpp"
#include "kintsugi/plan/search.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/train/run_config.hpp"
#include "support/configs.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

using testing::cluster_preset;

// One block and one micro-batch, no embedding or head: the per-block terms alone.
StepShape one_block(std::int64_t micro_batch, std::int64_t seq, std::int64_t a,
                    std::int64_t g) {
  StepShape s{.micro_batch = micro_batch, .seq = seq, .micro_batches = 1};
  s.activation_element_bytes = a;
  s.param_element_bytes = a;
  s.element_bytes = g;
  s.blocks = 1;
  s.embedding = s.head = false;
  return s;
}

// The bytes each collective of the grid's layers sends, summed by group and collective as
// comm_volume.hpp names them.
std::map<std::string, double> layer_sums(const std::vector<GridLayer>& layers, std::int64_t x,
                                         std::int64_t y, std::int64_t z, double forwards) {
  std::map<std::string, double> out;
  for (const GridLayer& l : layers) {
    out["grid_z.all_gather"] += (forwards + 1) * ring_all_gather_bytes(l.gather, z);
    out["grid_z.reduce_scatter"] += ring_reduce_scatter_bytes(l.scatter, z);
    out[l.entry ? "grid_x.all_reduce" : "grid_y.all_reduce"] +=
        forwards * ring_all_reduce_bytes(l.forward_reduce, l.entry ? x : y);
    out["grid_x.all_gather"] += forwards * ring_all_gather_bytes(l.forward_gather, x) +
                                ring_all_gather_bytes(l.backward_gather, x);
    out[l.entry ? "grid_y.all_reduce" : "grid_x.all_reduce"] +=
        ring_all_reduce_bytes(l.backward_reduce, l.entry ? y : x);
  }
  for (auto it = out.begin(); it != out.end();) it = it->second > 0 ? std::next(it) : out.erase(it);
  return out;
}

// docs/parallelism.md's example: GPT-2 124M in bf16 with f32 gradients, 8 x 1024 tokens, a
// 2 x 2 x 2 grid moves 3.5 + 3.5 + 37.7 + 12.6 + 12.6 = 70.0 MB per block and micro-batch.
TEST(PlanGrid, BytesAreTheDocumentedFormula) {
  const ModelConfig m = model_preset("gpt2");
  const auto v = step_comm_bytes(m, {.tp = 8, .tensor_grid = {2, 2, 2}}, one_block(8, 1024, 2, 4));
  const double d = 768, f = 3072, qkv = 2304, rows = 8 * 1024 / 2.0;  // R = mb seq / Z
  const double block = (qkv + d + 2 * f) * d / 4;                     // B, k = 1
  EXPECT_DOUBLE_EQ(v.at("grid_z.all_gather"), 2 * 0.5 * block * 2);
  EXPECT_DOUBLE_EQ(v.at("grid_z.reduce_scatter"), 0.5 * block * 4);
  EXPECT_DOUBLE_EQ(v.at("grid_x.all_reduce"), 2 * 0.5 * rows * (qkv + 2 * f + d) / 2 * 2);
  EXPECT_DOUBLE_EQ(v.at("grid_x.all_gather"), 4 * 0.5 * rows * d * 2);
  EXPECT_DOUBLE_EQ(v.at("grid_y.all_reduce"), 4 * 2 * 0.5 * rows * d / 2 * 2);
  EXPECT_EQ(v.size(), 5u);
  auto mb = [&](const char* key) { return std::round(v.at(key) / 1e5) / 10; };
  EXPECT_DOUBLE_EQ(mb("grid_z.all_gather"), 3.5);
  EXPECT_DOUBLE_EQ(mb("grid_x.all_reduce"), 37.7);
  EXPECT_DOUBLE_EQ(mb("grid_y.all_reduce"), 12.6);
  double total = 0;
  for (const auto& [key, bytes] : v) total += bytes;
  EXPECT_DOUBLE_EQ(std::round(total / 1e5) / 10, 70.0);
}

// The time model prices the layers one by one (grid_cost.hpp); together they are comm_volume's
// totals, for GELU and SwiGLU blocks, every grid shape and with full recomputation.
TEST(PlanGrid, LayersAddUpToTheTotals) {
  for (const char* name : {"gpt2", "llama-7b"}) {
    const ModelConfig m = model_preset(name);
    for (const std::vector<std::int64_t>& g :
         {std::vector<std::int64_t>{2, 2, 2}, {1, 4, 1}, {4, 1, 2}, {1, 1, 8}, {2, 4, 1}}) {
      for (bool full : {false, true}) {
        StepShape s = one_block(8, 256, 2, 4);
        s.recompute_full = full;
        const auto totals = step_comm_bytes(m, {.tp = g[0] * g[1] * g[2], .tensor_grid = g}, s);
        const auto layers = grid_block_layers(m, g, 8.0 / g[2] * 256, 2, 2, 4);
        const auto sums = layer_sums(layers, g[0], g[1], g[2], full ? 2 : 1);
        ASSERT_EQ(sums.size(), totals.size()) << name;
        for (const auto& [key, bytes] : totals)
          EXPECT_NEAR(sums.at(key), bytes, 1e-6 * bytes) << name << " " << key;
      }
    }
  }
}

// 1 x N x 1 is Megatron's layout over y (docs/parallelism.md): the bytes of --tp N.
TEST(PlanGrid, OneByNByOneMovesWhatTensorParallelMoves) {
  const ModelConfig m = model_preset("gpt2");
  StepShape s{.micro_batch = 4, .seq = 512, .micro_batches = 3, .grad_elements = 1000};
  s.activation_element_bytes = 2;
  const auto tp = step_comm_bytes(m, {.tp = 4}, s);
  const auto grid = step_comm_bytes(m, {.tp = 4, .tensor_grid = {1, 4, 1}}, s);
  EXPECT_DOUBLE_EQ(grid.at("grid_y.all_reduce") + grid.at("grid_xy.all_reduce"),
                   tp.at("tp.all_reduce"));
  EXPECT_EQ(grid.size(), 2u);
}

// What one rank of a grid holds of a block: the weight blocks' 1/(X Y Z), the biases' outer
// slices and the norms; all but the weight blocks replicated over z.
TEST(PlanGrid, ABlocksElementsOnARank) {
  const ModelConfig m = model_preset("gpt2");
  const double d = 768, f = 3072, qkv = 2304;
  const GridBlockElements e = grid_block_elements(m, {2, 2, 2});
  EXPECT_DOUBLE_EQ((e.local - e.depth_replicated) * 8, (qkv + d + 2 * f) * d);
  EXPECT_DOUBLE_EQ(e.depth_replicated, 4 * d + (qkv + f) / 2 + 2 * d / 2);
  const GridBlockElements one = grid_block_elements(m, {1, 1, 1});
  EXPECT_DOUBLE_EQ(one.local, block_parameters(m).total());
}

// Perlmutter's spec reproduces the six bus bandwidths the AxoNN authors measured there
// (configs/clusters/perlmutter.toml): pairs and the whole node inside, one, two and four GPUs
// of the ring per node across nodes.
TEST(PlanGrid, RingLinksReproducePerlmuttersMeasuredRates) {
  const ClusterSpec p = cluster_preset("perlmutter");
  EXPECT_TRUE(p.intra_node_all_to_all && p.multi_rail);
  EXPECT_DOUBLE_EQ(p.ring_link({0, 1}).bandwidth_gbs, 75);        // measured 76
  EXPECT_DOUBLE_EQ(p.ring_link({0, 2}).bandwidth_gbs, 75);
  EXPECT_DOUBLE_EQ(p.ring_link({0, 1, 2, 3}).bandwidth_gbs, 225);  // 225
  EXPECT_DOUBLE_EQ(p.ring_link({0, 4, 8, 12}).bandwidth_gbs, 20);  // 20
  EXPECT_DOUBLE_EQ(p.ring_link({0, 2, 4, 6}).bandwidth_gbs, 40);   // 40
  EXPECT_DOUBLE_EQ(p.ring_link({0, 1, 2, 3, 4, 5, 6, 7}).bandwidth_gbs, 80);  // 80
  EXPECT_DOUBLE_EQ(p.ring_link({0, 4}).latency_us, p.inter_node.latency_us);
  // A pipeline transfer inside the node takes one peer's links (node_link of two devices).
  EXPECT_DOUBLE_EQ(p.node_link(false, 2).bandwidth_gbs, 75);
  // The shapes survive to_toml; without them a ring runs at group_link's rate.
  const ClusterSpec again = parse_cluster(to_toml(p), "again");
  EXPECT_TRUE(again.intra_node_all_to_all && again.multi_rail);
  const ClusterSpec f = cluster_preset("frontier");
  for (const std::vector<int>& ring : {std::vector<int>{0, 1}, {0, 1, 2, 3}, {0, 8}, {0, 1, 8, 9}})
    EXPECT_DOUBLE_EQ(f.ring_link(ring).bandwidth_gbs, f.group_link(ring).bandwidth_gbs);
  std::string text = to_toml(p);
  text.replace(text.find("multi_rail = true"), 17, "multi_rail = 1");
  EXPECT_THROW(parse_cluster(text, "x"), Error);
}

// Overlap hides the z gathers and reduce-scatters and backward's dx reductions; the compute
// is the same, and the bytes too.
TEST(PlanGrid, OverlapHidesCollectives) {
  const Workload w{.model = model_preset("gpt-1.4b"), .global_batch = 32};
  const ClusterSpec c = cluster_preset("dgx-a100-80gb");
  Layout l{.parallel = {.tp = 8, .dp = 1, .tensor_grid = {2, 2, 2}}, .micro_batch = 8};
  const Prediction on = predict(w, c, l);
  l.parallel.tensor_grid_overlap = false;
  const Prediction off = predict(w, c, l);
  EXPECT_LT(on.time.tp, off.time.tp);
  EXPECT_GT(on.time.tp, 0);
  EXPECT_DOUBLE_EQ(on.time.compute, off.time.compute);
  EXPECT_EQ(on.first_stage_comm_bytes, off.first_stage_comm_bytes);
  EXPECT_EQ(describe(off.layout), "tp 8 grid 2x2x2 no-overlap pp 1 dp 1 mb 8");
}

// The search enumerates every grid of each tp the model's shapes allow (sequence parallelism
// with 1D only), each one a layout the runtime resolves, and keeps to the pins.
TEST(PlanGrid, SearchEnumeratesTheGridsTheRuntimeAccepts) {
  ModelConfig m = model_preset("gpt-tiny");
  m.n_layer = 2;
  m.d_model = 64;
  m.n_head = 4;
  m.d_ff = 256;
  m.seq_len = 32;
  const Workload w{.model = m, .global_batch = 8, .precision = Precision::fp32};
  const auto layouts = enumerate_layouts(w, 4, 4, {});
  std::set<std::vector<std::int64_t>> grids;
  RunConfig base;
  base.model = m;
  base.train.global_batch = 8;
  const auto path = std::filesystem::temp_directory_path() / "kintsugi-plan-grid-test.toml";
  for (const Layout& l : layouts) {
    if (l.parallel.tensor_grid.empty()) continue;
    grids.insert(l.parallel.tensor_grid);
    EXPECT_FALSE(l.parallel.sequence_parallel);
    EXPECT_EQ(l.micro_batch % l.parallel.tensor_grid[2], 0) << describe(l);
    std::ofstream(path) << layout_config_toml(base, l);
    RunConfig c = load_run_config(path.string(), {});
    ASSERT_NO_THROW(resolve_layout(c, 4)) << describe(l);
    EXPECT_EQ(c.parallel.tensor_grid, l.parallel.tensor_grid);
  }
  // Every factorization of 2 and 4 (the micro model's shapes allow them all) but 1 x N x 1,
  // which is the 1D layout (docs/parallelism.md, "Degenerate grids"), searched as such.
  const std::set<std::vector<std::int64_t>> want = {
      {2, 1, 1}, {1, 1, 2}, {4, 1, 1}, {1, 1, 4}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}};
  EXPECT_EQ(grids, want);
  // Named, it is searched.
  SearchSpace named;
  named.pins.pin("tensor_grid", {"[1,2,1]"});
  ASSERT_FALSE(enumerate_layouts(w, 4, 4, named).empty());
  for (const Layout& l : enumerate_layouts(w, 4, 4, named))
    EXPECT_EQ(l.parallel.tensor_grid, (std::vector<std::int64_t>{1, 2, 1}));
  SearchSpace pinned;
  pinned.pins.pin("tensor_grid", {"[2,1,2]"});
  pinned.pins.pin("tensor_grid_overlap", {"false", "true"});
  std::set<bool> overlaps;
  for (const Layout& l : enumerate_layouts(w, 4, 4, pinned)) {
    EXPECT_EQ(l.parallel.tensor_grid, (std::vector<std::int64_t>{2, 1, 2}));
    overlaps.insert(l.parallel.tensor_grid_overlap);
  }
  EXPECT_EQ(overlaps.size(), 2u);
  // --write-config's run config carries the grid and its overlap.
  Layout off{.parallel = {.tp = 4, .tensor_grid = {2, 1, 2}, .tensor_grid_overlap = false},
             .micro_batch = 2};
  std::ofstream(path) << layout_config_toml(base, off);
  RunConfig c = load_run_config(path.string(), {});
  EXPECT_EQ(c.parallel.tensor_grid, off.parallel.tensor_grid);
  EXPECT_FALSE(c.parallel.tensor_grid_overlap);
  std::filesystem::remove(path);
  SearchSpace one_d;
  one_d.pins.pin("tensor_grid", {"[]"});
  for (const Layout& l : enumerate_layouts(w, 4, 4, one_d))
    EXPECT_TRUE(l.parallel.tensor_grid.empty());
  // Unnamed grids stay inside a node, as 1D tensor parallelism does; a named one may span nodes.
  for (const Layout& l : enumerate_layouts(w, 4, 2, {})) EXPECT_LE(l.parallel.tp, 2) << describe(l);
  SearchSpace across;
  across.pins.pin("tensor_grid", {"[]", "[2,2,1]"});
  EXPECT_FALSE(enumerate_layouts(w, 4, 2, across).empty());
}

// The search picks a grid where the model predicts it faster than every 1D layout, and a 1D
// layout where none is.
TEST(PlanGrid, SearchChoosesAGridOnlyWhenItIsFaster) {
  const ClusterSpec c = cluster_preset("dgx-h100");
  const Workload w{.model = model_preset("gpt2"), .global_batch = 64};
  SearchSpace one_d;
  one_d.pins.pin("tensor_grid", {"[]"});
  auto best = [&](std::int64_t world, const SearchSpace& s) {
    const SearchResult r = search_layouts(w, c, world, s);
    EXPECT_FALSE(r.ranked.empty());
    return r.ranked.front();
  };
  // 4 nodes: a grid's z all-gathers hide behind its GEMMs, where ZeRO-3's do not.
  const Prediction with_grids = best(32, {});
  ASSERT_FALSE(with_grids.layout.parallel.tensor_grid.empty()) << describe(with_grids.layout);
  EXPECT_LT(with_grids.time.total(), best(32, one_d).time.total());
  // One node: plain data parallelism beats every grid.
  const SearchResult node = search_layouts(w, c, 8, {});
  EXPECT_TRUE(node.ranked.front().layout.parallel.tensor_grid.empty())
      << describe(node.ranked.front().layout);
  EXPECT_TRUE(std::any_of(node.ranked.begin(), node.ranked.end(), [](const Prediction& p) {
    return !p.layout.parallel.tensor_grid.empty();
  }));
}

}  // namespace
}  // namespace kintsugi
