// The layout record (core/parallel_layout.hpp): its group sizes, and the one sentence its
// problem() gives for each way a layout can be inconsistent in itself.
#include "kintsugi/core/parallel_layout.hpp"

#include <gtest/gtest.h>

#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi {
namespace {

TEST(ParallelLayout, WorldAndShardGroups) {
  const ParallelLayout l{.tp = 2, .pp = 3, .dp = 8};
  EXPECT_EQ(l.world(), 48);
  EXPECT_EQ(l.shards(), 1);  // no ZeRO: nothing sharded
  EXPECT_EQ(l.replicas(), 1);
  const ParallelLayout zero{.dp = 8, .zero = ZeroStage::optimizer};
  EXPECT_EQ(zero.shards(), 8);
  EXPECT_EQ(zero.replicas(), 1);
  const ParallelLayout hybrid{.dp = 8, .zero = ZeroStage::parameters, .hsdp = 2};
  EXPECT_EQ(hybrid.shards(), 2);
  EXPECT_EQ(hybrid.replicas(), 4);
  EXPECT_FALSE(l.has_grid());
  EXPECT_TRUE((ParallelLayout{.tp = 4, .tensor_grid = {2, 2, 1}}.has_grid()));
  // Context parallelism: more ranks, and ZeRO over dp x cp.
  const ParallelLayout context{.tp = 2, .dp = 2, .zero = ZeroStage::parameters, .cp = 4};
  EXPECT_EQ(context.world(), 16);
  EXPECT_EQ(context.data_ranks(), 8);
  EXPECT_EQ(context.shards(), 8);
  const ParallelLayout hybrid_context{.dp = 2, .zero = ZeroStage::parameters, .hsdp = 2, .cp = 2};
  EXPECT_EQ(hybrid_context.shards(), 2);
  EXPECT_EQ(hybrid_context.replicas(), 2);
}

TEST(ParallelLayout, ValidLayoutsHaveNoProblem) {
  EXPECT_EQ(ParallelLayout{}.problem(), "");
  EXPECT_EQ((ParallelLayout{.tp = 2,
                            .pp = 2,
                            .dp = 4,
                            .order = "pp-dp-tp",
                            .schedule = PipelineSchedule::interleaved,
                            .virtual_stages = 2,
                            .zero = ZeroStage::optimizer,
                            .hsdp = 2,
                            .sequence_parallel = true}
                 .problem()),
            "");
  EXPECT_EQ((ParallelLayout{.tp = 8, .tensor_grid = {2, 2, 2}}.problem()), "");
}

// Each problem in one line, naming the value to change.
TEST(ParallelLayout, ProblemMessages) {
  auto problem = [](const ParallelLayout& l) { return l.problem(); };
  EXPECT_EQ(problem({.dp = 0}), "parallel.dp = 0 must be at least 1 once resolved");
  EXPECT_EQ(problem({.virtual_stages = 0}), "parallel.virtual_stages = 0 must be at least 1");
  EXPECT_EQ(problem({.tp = 0}), "parallel.tp = 0 must be at least 1");
  EXPECT_EQ(problem({.tp = 4, .tensor_grid = {2, 2}}),
            "parallel.tensor_grid must be three whole numbers of at least 1, [x, y, z], not 2 "
            "entries; --tensor-grid 2,2,1 for example");
  EXPECT_EQ(problem({.tp = 4, .tensor_grid = {2, 1, 1}}),
            "--tensor-grid 2,1,1 has 2 ranks but tp = 4");
  EXPECT_EQ(problem({.tp = 2, .sequence_parallel = true, .tensor_grid = {2, 1, 1}}),
            "--tensor-grid 2,1,1 with --sequence-parallel: 3D tensor parallelism already splits "
            "the token rows over z, and sequence parallelism is defined for 1D tensor "
            "parallelism only; drop one of them");
  EXPECT_EQ(problem({.pp = 2, .zero = ZeroStage::gradients}),
            "--zero 2 with --pp 2: sharded gradients are reduce-scattered every micro-batch as "
            "each layer finishes, which pipelining interleaves across micro-batches; use --zero 1 "
            "with pipeline parallelism (as Megatron-LM's distributed optimizer does)");
  EXPECT_EQ(problem({.dp = 4, .hsdp = 2}),
            "--hsdp 2 shards state within groups, which needs --zero 1, 2 or 3");
  EXPECT_EQ(problem({.dp = 4, .zero = ZeroStage::optimizer, .hsdp = 3}),
            "--hsdp 3 must be at least 2 and divide the data-parallel ranks (4)");
  EXPECT_EQ(problem({.dp = 4, .zero = ZeroStage::optimizer, .hsdp = -1}),
            "parallel.hsdp = -1 must not be negative");
  EXPECT_EQ(problem({.order = "tp-xp-pp"}),
            "parallel.order = \"tp-xp-pp\": \"xp\" is not tp, cp, dp or pp");
  EXPECT_EQ(problem({.order = "tp-dp"}),
            "parallel.order = \"tp-dp\" must name tp, dp and pp once each (and cp at most "
            "once), e.g. \"tp-dp-pp\" or \"tp-cp-dp-pp\"");
  EXPECT_EQ(problem({.cp = 0}), "parallel.cp = 0 must be at least 1");
  EXPECT_EQ(problem({.tp = 4, .cp = 2, .tensor_grid = {2, 2, 1}}),
            "--cp 2 with --tensor-grid: the grid's z already splits a micro-batch's rows and its "
            "layers do not exchange keys and values; use 1D --tp with --cp");
  EXPECT_EQ(problem({.cp = 2, .cp_comm = CpComm::ring}), "");
  EXPECT_EQ(problem({.dp = 4, .zero = ZeroStage::optimizer, .hsdp = 2, .cp = 2}), "");
  EXPECT_EQ(problem({.dp = 2, .zero = ZeroStage::optimizer, .hsdp = 3, .cp = 2}),
            "--hsdp 3 must be at least 2 and divide the data-parallel ranks (dp x cp = 4)");
  // Expert parallelism is carved out of the data-parallel ranks (docs/moe.md).
  EXPECT_EQ(problem({.dp = 4, .ep = 2}), "");
  EXPECT_EQ(problem({.dp = 4, .ep = 0}), "parallel.ep = 0 must be at least 1");
  EXPECT_EQ(problem({.dp = 2, .ep = 4}),
            "--ep 4 must divide the data-parallel ranks (dp = 2): the experts are split over "
            "groups of ep data-parallel ranks; change --ep or --dp");
  EXPECT_EQ(problem({.dp = 4, .zero = ZeroStage::optimizer, .hsdp = 2, .ep = 2}),
            "--ep 2 with --hsdp 2: hybrid sharding of the experts' state is not built; drop "
            "--hsdp (ZeRO shards the experts over the dp / ep ranks)");
  EXPECT_EQ(problem({.dp = 2, .cp = 2, .ep = 2}),
            "--ep 2 with --cp 2: expert parallelism is carved out of the data-parallel ranks and "
            "does not run beside context parallelism; use --cp 1");
  EXPECT_EQ((ParallelLayout{.dp = 8, .zero = ZeroStage::optimizer, .ep = 2}.expert_shards()), 4);
  EXPECT_EQ((ParallelLayout{.dp = 8, .ep = 2}.expert_shards()), 1);
  // Before the world size resolves it, a dp of 0 is in range (the config's "from the world").
  EXPECT_EQ((ParallelLayout{.dp = 0}.value_problem()), "");
  for (const std::string& message : {problem({.dp = 0}), problem({.order = "dp-dp-pp"})})
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// On a job of N ranks: the grid implies tp, dp = 0 takes the rest of the world.
TEST(ParallelLayout, Resolved) {
  const ParallelLayout grid =
      ParallelLayout{.pp = 2, .dp = 0, .tensor_grid = {2, 2, 1}}.resolved(16);
  EXPECT_EQ(grid.tp, 4);
  EXPECT_EQ(grid.dp, 2);
  EXPECT_EQ(grid.problem(), "");
  auto message = [](const ParallelLayout& l, std::int64_t world) {
    try {
      l.resolved(world);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({.tp = 2, .tensor_grid = {2, 2, 1}}, 4),
            "--tensor-grid 2,2,1 has 4 ranks but --tp is 2: drop --tp (the grid implies it) or "
            "make them agree");
  EXPECT_EQ(message({.tp = 2, .dp = 0}, 3),
            "the job has 3 ranks, not a multiple of tp 2 x pp 1: launch a multiple of 2 ranks "
            "(mpirun -np 2 kintsugi train ...) or change --tp / --pp");
  EXPECT_EQ(message({.tp = 2, .dp = 3}, 4),
            "the job has 4 ranks but tp 2 x dp 3 x pp 1 = 6: change --dp to 2 or launch 6 ranks");
  EXPECT_EQ(message({.tp = 2, .dp = 0, .cp = 2}, 6),
            "the job has 6 ranks, not a multiple of tp 2 x pp 1 x cp 2: launch a multiple of 4 "
            "ranks (mpirun -np 4 kintsugi train ...) or change --tp / --pp / --cp");
  EXPECT_EQ((ParallelLayout{.dp = 0, .cp = 2}.resolved(8).dp), 4);
}

TEST(ParallelLayout, OrderDims) {
  EXPECT_EQ(order_dims("pp-tp-dp"), (std::array{Dim::pp, Dim::tp, Dim::cp, Dim::dp}));
  EXPECT_EQ(order_dims("dp-pp-tp"), (std::array{Dim::dp, Dim::pp, Dim::tp, Dim::cp}));
  EXPECT_EQ(order_dims("cp-tp-dp-pp"), (std::array{Dim::cp, Dim::tp, Dim::dp, Dim::pp}));
  EXPECT_THROW(order_dims("tp-tp-pp"), Error);
  EXPECT_THROW(order_dims("tp-cp-pp"), Error);
  EXPECT_THROW(order_dims("tp-cp-dp-pp-cp"), Error);
  EXPECT_EQ(name_of(Dim::dp), "dp");
}

}  // namespace
}  // namespace kintsugi
