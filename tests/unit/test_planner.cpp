// The planner: cluster specs, the cost model against the runtime's own accounting and the
// schedule simulator, the search's validity, and the refit.
#include <gtest/gtest.h>

#include <cmath>

#include <set>

#include <filesystem>
#include <fstream>

#include "kintsugi/model/gpt.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"
#include "kintsugi/plan/cluster.hpp"
#include "kintsugi/plan/cost_model.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/plan/memory.hpp"
#include "kintsugi/plan/refit.hpp"
#include "kintsugi/plan/search.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {
namespace {

ClusterSpec preset(const std::string& name) {
  return load_cluster(std::string(KINTSUGI_CONFIGS_DIR) + "/clusters/" + name + ".toml");
}

ModelConfig micro_model() {
  ModelConfig c = model_preset("gpt-tiny");
  c.n_layer = 4;
  c.d_model = 64;
  c.n_head = 4;
  c.d_ff = 256;
  c.seq_len = 32;
  return c;
}

TEST(Cluster, PresetsLoadWithTheirDatasheetNumbers) {
  const ClusterSpec f = preset("frontier");
  EXPECT_EQ(f.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(f.peak_tflops(Precision::bf16), 191.5);
  EXPECT_DOUBLE_EQ(f.memory_gb, 64);
  EXPECT_DOUBLE_EQ(preset("gaudi2").memory_gb, 96);
  EXPECT_DOUBLE_EQ(preset("dgx-a100-80gb").peak_tflops(Precision::bf16), 312);
  EXPECT_DOUBLE_EQ(preset("dgx-h100").peak_tflops(Precision::fp16), 989);
  // What to_toml writes parses back to the same spec.
  const ClusterSpec again = parse_cluster(to_toml(f), "again");
  EXPECT_DOUBLE_EQ(again.inter_node.bandwidth_gbs, f.inter_node.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(again.gemm_half_dim, f.gemm_half_dim);
}

TEST(Cluster, BadSpecsNameTheKey) {
  const std::string path = std::string(KINTSUGI_FIXTURES_DIR) + "/bad-cluster.toml";
  try {
    load_cluster(path);
    FAIL() << "a spec without intra_node.bandwidth_gbs loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing key `intra_node.bandwidth_gbs`"),
              std::string::npos)
        << e.what();
  }
  std::string text = to_toml(preset("gaudi2"));
  text.replace(text.find("max_efficiency = 0.75"), 21, "max_efficiency = 1.5");
  EXPECT_THROW(parse_cluster(text, "x"), Error);
  EXPECT_THROW(load_cluster("no-such-cluster"), Error);
}

// Values that are not a device's (NaN passed every range check; inf, 0 and negatives printed
// 0 us steps and infinite MFU) and unknown keys (a typo silently kept the old value) are refused,
// naming the key; for an unknown key also the known ones.
TEST(Cluster, NonFiniteZeroNegativeAndUnknownKeysAreRefused) {
  const std::string good = to_toml(preset("dgx-h100"));
  auto error = [](const std::string& text) -> std::string {
    try {
      parse_cluster(text, "spec.toml");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(error(good), "");
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"bandwidth_gbs = 450", "intra_node.bandwidth_gbs"},
      {"bandwidth_gbs = 50", "inter_node.bandwidth_gbs"},
      {"half_dim = 192", "gemm.half_dim"},
      {"memory_bandwidth_gbs = 3350", "device.memory_bandwidth_gbs"},
      {"peak_tflops_bf16 = 989", "device.peak_tflops_bf16"},
      {"latency_us = 3", "intra_node.latency_us"},
  };
  for (const auto& [line, key] : keys) {
    const std::string name = line.substr(0, line.find(" = "));
    for (const char* v : {"nan", "inf", "-inf"})
      EXPECT_NE(error(edited(line, name + " = " + v)).find("`" + key + "` = "), std::string::npos)
          << key << " = " << v << ": " << error(edited(line, name + " = " + v));
    EXPECT_NE(error(edited(line, name + " = -1")).find("`" + key + "` = -1 must be"),
              std::string::npos)
        << key;
  }
  for (const std::string& line : {"bandwidth_gbs = 450", "peak_tflops_bf16 = 989",
                                  "memory_bandwidth_gbs = 3350"})
    EXPECT_NE(error(edited(line, line.substr(0, line.find(" = ")) + " = 0")).find("must be > 0"),
              std::string::npos)
        << line;
  EXPECT_NE(error(edited("bandwidth_gbs = 450", "bandwith_gbs = 450"))
                .find("spec.toml: unknown key `intra_node.bandwith_gbs`: the known keys of "
                      "[intra_node] are bandwidth_gbs, latency_us"),
            std::string::npos)
      << error(edited("bandwidth_gbs = 450", "bandwith_gbs = 450"));
  EXPECT_NE(error("gpus = 8\n" + good).find("unknown key `gpus`: the known keys at the top level"),
            std::string::npos);
  EXPECT_NE(error(good + "\n[hots]\nstep_overhead_ms = 1\n").find("unknown key `hots`"),
            std::string::npos);
  EXPECT_NE(error(good + "\n[host]\nstep_overhead_ms = nan\n")
                .find("`host.step_overhead_ms` = nan must be a finite number"),
            std::string::npos);
}

// Frontier's node: the two GCDs of an MI250X share a fast link, other pairs a slower one, so a
// tp 2 ring runs at the package link and a tp 4 or tp 8 ring at the node's slowest.
TEST(Cluster, LinkTiersInsideANode) {
  const ClusterSpec f = preset("frontier");
  EXPECT_EQ(f.devices_per_package, 2);
  EXPECT_DOUBLE_EQ(f.group_link({0, 1}).bandwidth_gbs, f.package.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(f.group_link({2, 3}).bandwidth_gbs, f.package.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(f.group_link({0, 1, 2, 3}).bandwidth_gbs, f.intra_node.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(f.group_link({1, 2}).bandwidth_gbs, f.intra_node.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(f.group_link({0, 8}).bandwidth_gbs, f.inter_node.bandwidth_gbs);
  EXPECT_LT(f.package.bandwidth_gbs, 1e9);
  EXPECT_GT(f.package.bandwidth_gbs, f.intra_node.bandwidth_gbs);
  // Without a [package] section every pair in a node is alike.
  const ClusterSpec a = preset("dgx-a100-80gb");
  EXPECT_DOUBLE_EQ(a.group_link({0, 1}).bandwidth_gbs, a.intra_node.bandwidth_gbs);
  // The tiers and the host overhead survive to_toml; a package must divide the node.
  const ClusterSpec again = parse_cluster(to_toml(f), "again");
  EXPECT_EQ(again.devices_per_package, 2);
  EXPECT_DOUBLE_EQ(again.package.bandwidth_gbs, f.package.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(again.step_overhead_ms, f.step_overhead_ms);
  std::string text = to_toml(f);
  text.replace(text.find("[package]\ndevices = 2"), 21, "[package]\ndevices = 3");
  EXPECT_THROW(parse_cluster(text, "x"), Error);
  // A tp 2 layout predicts less tensor-parallel time than the same on a spec without tiers.
  const Workload w{.model = model_preset("gpt-1.4b"), .global_batch = 8};
  ClusterSpec flat = f;
  flat.devices_per_package = 0;
  const Layout l{.tp = 2, .dp = 4, .micro_batch = 2};
  EXPECT_LT(predict(w, f, l).time.tp, predict(w, flat, l).time.tp);
}

// The memory-bound work the cost model adds to the GEMMs: a materialized attention kernel's
// s x s traffic, and the cluster's per-step host overhead.
TEST(CostModel, MaterializedAttentionAndHostOverheadTakeTime) {
  const ModelConfig m = model_preset("gpt-1.4b");
  ClusterSpec c = preset("dgx-a100-80gb");
  Workload w{.model = m, .global_batch = 8};
  const Layout l{.tp = 2, .dp = 4, .micro_batch = 2};
  const Prediction flash = predict(w, c, l);
  w.attention = AttentionKernel::materialized;
  const Prediction materialized = predict(w, c, l);
  // 5 a s^2 bytes per sequence and layer on a tp share, 4 passes, at the memory bandwidth.
  const double bytes = 4.0 * 5 * m.n_head / 2.0 * 2 * double(m.seq_len) * m.seq_len * m.n_layer *
                       (8 / (2 * 4));
  EXPECT_NEAR(materialized.time.compute - flash.time.compute,
              bytes / (c.memory_bandwidth_gbs * 1e9), 1e-9);
  c.step_overhead_ms = 25;
  EXPECT_NEAR(predict(w, c, l).time.total() - materialized.time.total(), 0.025, 1e-9);
}

// A measured attention rate ([attention] tflops) replaces the GEMM curve for the attention core
// only: a slower kernel lengthens the compute by exactly its FLOPs at the new rate minus at the
// old, it survives to_toml, and a rate that is not positive is refused.
TEST(Cluster, MeasuredAttentionRateTimesTheAttentionCore) {
  ClusterSpec one = preset("dgx-h100");
  one.devices_per_node = 1;
  const Workload w{.model = model_preset("gpt2"), .global_batch = 8};
  const Layout l{.micro_batch = 8};
  const Prediction as_gemms = predict(w, one, l);
  ClusterSpec slow = one;
  slow.attention_tflops = 6.0;
  const Prediction measured = predict(w, slow, l);
  // Attention core FLOPs of a step, forward and backward, full s x s: 3 x 4 x rows x s x d x L.
  const double rows = 8.0 * w.model.seq_len;
  const double core = 12.0 * rows * w.model.seq_len * w.model.d_model * w.model.n_layer;
  EXPECT_GT(measured.time.compute, as_gemms.time.compute + 0.9 * core / 6e12);
  EXPECT_LT(measured.time.compute, as_gemms.time.compute + core / 6e12);
  EXPECT_DOUBLE_EQ(measured.time.optimizer, as_gemms.time.optimizer);
  EXPECT_DOUBLE_EQ(parse_cluster(to_toml(slow), "again").attention_tflops, 6.0);
  std::string text = to_toml(slow);
  text.replace(text.find("tflops = 6"), 10, "tflops = 0");
  EXPECT_THROW(parse_cluster(text, "x"), Error);
}

// A link's measured collective rates ([intra_node] all_reduce_gbs, ...) time those collectives
// only: a ZeRO-2 layout's data-parallel time scales with the reduce-scatter rate, not the
// all-reduce one; rates survive to_toml; zero, negative or non-finite rates are refused.
TEST(Cluster, MeasuredCollectiveRatesTimeTheirCollectives) {
  ClusterSpec c = preset("dgx-a100-80gb");
  c.devices_per_node = 2;
  c.intra_node.latency_us = 0;  // bandwidth terms only
  const Workload w{.model = model_preset("gpt2"), .global_batch = 8};
  const Layout zero2{.dp = 2, .micro_batch = 4, .zero = ZeroStage::gradients};
  const Layout plain{.dp = 2, .micro_batch = 4};
  const Prediction base2 = predict(w, c, zero2), base0 = predict(w, c, plain);
  ClusterSpec slow_rs = c;
  slow_rs.intra_node.reduce_scatter_gbs = c.intra_node.bandwidth_gbs / 4;
  EXPECT_GT(predict(w, slow_rs, zero2).time.dp, base2.time.dp);
  EXPECT_DOUBLE_EQ(predict(w, slow_rs, plain).time.dp, base0.time.dp);  // all-reduces only
  ClusterSpec slow_ar = c;
  slow_ar.intra_node.all_reduce_gbs = c.intra_node.bandwidth_gbs / 4;
  EXPECT_GT(predict(w, slow_ar, plain).time.dp, base0.time.dp);
  // Equal to the link's bandwidth: the same prediction as without the rates.
  ClusterSpec same = c;
  same.intra_node.all_reduce_gbs = same.intra_node.reduce_scatter_gbs =
      same.intra_node.all_gather_gbs = c.intra_node.bandwidth_gbs;
  EXPECT_DOUBLE_EQ(predict(w, same, zero2).time.total(), base2.time.total());
  const ClusterSpec again = parse_cluster(to_toml(slow_rs), "again");
  EXPECT_DOUBLE_EQ(again.intra_node.reduce_scatter_gbs, slow_rs.intra_node.reduce_scatter_gbs);
  EXPECT_DOUBLE_EQ(again.intra_node.all_reduce_gbs, 0.0);
  EXPECT_EQ(to_toml(c).find("reduce_scatter_gbs"), std::string::npos);  // absent stays absent
  for (const char* bad : {"0", "-1", "nan", "inf"}) {
    std::string text = to_toml(slow_rs);
    const auto at = text.find("reduce_scatter_gbs = ");
    text.replace(at, text.find('\n', at) - at, std::string("reduce_scatter_gbs = ") + bad);
    EXPECT_THROW(parse_cluster(text, "x"), Error) << bad;
  }
}

TEST(Cluster, GemmEfficiencySaturatesInEachDimension) {
  const ClusterSpec c = preset("dgx-a100-80gb");
  const double h = c.gemm_half_dim;
  EXPECT_NEAR(c.gemm_efficiency(h, h, h), c.gemm_max_efficiency / 8, 1e-12);
  EXPECT_LT(c.gemm_efficiency(512, 512, 512), c.gemm_efficiency(4096, 4096, 4096));
  EXPECT_NEAR(c.gemm_efficiency(1e9, 1e9, 1e9), c.gemm_max_efficiency, 1e-6);
  // Symmetric: a backward GEMM (dimensions permuted) is as efficient as its forward.
  EXPECT_DOUBLE_EQ(c.gemm_efficiency(100, 200, 300), c.gemm_efficiency(300, 100, 200));
}

// The serial layout's predicted parameter, gradient and activation bytes are what the runtime
// allocates and tracks for the same model.
TEST(CostModel, SerialMemoryMatchesTheRuntimesTrackedBytes) {
  const ModelConfig m = micro_model();
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const std::int64_t micro_batch = 2;
  GptModel model(*backend, m, DType::f32, micro_batch, m.seq_len);
  const Workload w{.model = m, .global_batch = 4, .precision = Precision::fp32};
  const Layout l{.micro_batch = micro_batch};
  const Prediction p = predict(w, preset("dgx-a100-80gb"), l);
  EXPECT_DOUBLE_EQ(p.memory.parameters, double(memory.current(MemoryKind::parameters)));
  EXPECT_DOUBLE_EQ(p.memory.gradients, double(memory.current(MemoryKind::gradients)));
  EXPECT_DOUBLE_EQ(p.memory.activations, double(memory.current(MemoryKind::activations)));
  // Adam's two moments in f32.
  EXPECT_DOUBLE_EQ(p.memory.optimizer_state, 2 * p.memory.parameters);
}

TEST(CostModel, TensorParallelShardsAddUpToTheModel) {
  const ModelConfig m = model_preset("gpt-1.4b");
  const Workload w{.model = m, .global_batch = 8, .precision = Precision::fp32};
  const ClusterSpec c = preset("dgx-a100-80gb");
  const double serial = predict(w, c, {.micro_batch = 1}).memory.parameters / 4;
  const double tp4 = predict(w, c, {.tp = 4, .micro_batch = 1}).memory.parameters / 4;
  // Sharded matrices add up; the replicated norms, row-parallel biases and positions do not.
  const double replicated = m.n_layer * 6.0 * m.d_model + 2.0 * m.d_model + m.seq_len * m.d_model;
  const double padding = double(m.padded_vocab(4) - m.padded_vocab(1)) * m.d_model;
  EXPECT_NEAR(4 * tp4 - 3 * replicated, serial + padding, 1.0);
  EXPECT_EQ(static_cast<std::int64_t>(serial),
            parameter_count(m) + (m.padded_vocab() - m.vocab_size) * m.d_model);
}

TEST(CostModel, MoreDataParallelRanksNeverIncreaseZero3State) {
  const ModelConfig m = model_preset("gpt-1.4b");
  const Workload w{.model = m, .global_batch = 64, .precision = Precision::bf16};
  const ClusterSpec c = preset("dgx-h100");
  double last = 1e300;
  for (std::int64_t dp : {1, 2, 4, 8, 16, 32}) {
    const MemoryPrediction mem = predict(w, c, {.dp = dp, .micro_batch = 1, .zero = dp > 1 ? ZeroStage::parameters : ZeroStage::none}).memory;
    const double state = mem.parameters + mem.gradients + mem.optimizer_state;
    EXPECT_LE(state, last) << "dp " << dp;
    last = state;
  }
  // ZeRO-3 over 8 ranks: (2 + 4 + 12) bytes per parameter / 8.
  const MemoryPrediction z3 = predict(w, c, {.dp = 8, .micro_batch = 1, .zero = ZeroStage::parameters}).memory;
  const MemoryPrediction z0 = predict(w, c, {.dp = 8, .micro_batch = 1, .zero = ZeroStage::none}).memory;
  EXPECT_NEAR((z3.parameters + z3.gradients + z3.optimizer_state) * 8,
              z0.parameters + z0.gradients + z0.optimizer_state, 1.0);
}

// The predicted bubble is the schedule's: (p - 1) / (v m) of the busy time, as the simulator of
// the instruction lists finds for equal stages.
TEST(CostModel, BubbleMatchesTheSchedules) {
  ModelConfig m = micro_model();
  m.n_layer = 8;
  const Workload w{.model = m, .global_batch = 16, .precision = Precision::fp32};
  const ClusterSpec c = preset("dgx-a100-80gb");
  for (auto [schedule, v] : {std::pair{PipelineSchedule::gpipe, 1}, {PipelineSchedule::one_f_one_b, 1},
                             {PipelineSchedule::interleaved, 2}}) {
    const Layout l{.pp = 4, .micro_batch = 2, .schedule = schedule, .virtual_stages = v};
    ASSERT_EQ(layout_problem(w, l), "");
    const Prediction p = predict(w, c, l);
    const PipelineShape shape{4, v, 8};
    const auto sim = simulate(schedule, shape, 1.0, 2.0);
    const double busy = sim.makespan - sim.idle[0];
    EXPECT_NEAR(p.time.bubble / (p.time.compute + p.time.tp), sim.idle[0] / busy, 1e-9)
        << name_of(schedule);
    EXPECT_NEAR(p.time.bubble / (p.time.compute + p.time.tp + p.time.bubble), bubble_fraction(shape),
                1e-9);
  }
}

// Every enumerated layout is one the runtime accepts: its written run config loads and
// resolves on tp x pp x dp ranks.
TEST(Search, EnumeratesOnlyLayoutsTheRuntimeAccepts) {
  const ModelConfig m = micro_model();
  const Workload w{.model = m, .global_batch = 8, .precision = Precision::fp32};
  // 1D only: PlanGrid.SearchEnumeratesTheGridsTheRuntimeAccepts resolves the grids.
  const auto layouts = enumerate_layouts(w, 8, 8, {.grids = false});
  ASSERT_GT(layouts.size(), 100u);
  RunConfig base;
  base.model = m;
  base.train.global_batch = 8;
  const auto path = std::filesystem::temp_directory_path() / "kintsugi-plan-test.toml";
  bool saw_tp = false, saw_pp = false, saw_interleaved = false, saw_zero3 = false;
  for (const Layout& l : layouts) {
    ASSERT_EQ(l.world(), 8);
    ASSERT_EQ(m.n_head % l.tp, 0);
    std::ofstream(path) << layout_config_toml(base, l);
    RunConfig c = load_run_config(path.string(), {});
    ASSERT_NO_THROW(resolve_layout(c, 8)) << describe(l);
    EXPECT_EQ(c.parallel.dp, l.dp);
    saw_tp |= l.tp > 1;
    saw_pp |= l.pp > 1;
    saw_interleaved |= l.virtual_stages > 1;
    saw_zero3 |= l.zero == ZeroStage::parameters;
  }
  EXPECT_TRUE(saw_tp && saw_pp && saw_interleaved && saw_zero3);
  // n_head 4: tp 8 is not a layout; a global batch of 6 leaves no dp 4.
  for (const Layout& l : layouts) EXPECT_LE(l.tp, 4);
  const auto six = enumerate_layouts({.model = m, .global_batch = 6}, 8, 8, {});
  for (const Layout& l : six) EXPECT_EQ(6 % l.dp, 0);
  std::filesystem::remove(path);
}

// A pin is one value or a list: only the listed values are enumerated, each of them is.
TEST(Search, PinsTakeListsOfValues) {
  const Workload w{.model = micro_model(), .global_batch = 8, .precision = Precision::fp32};
  SearchSpace space;
  space.zero = {ZeroStage::none, ZeroStage::optimizer};
  space.tp = {1, 2};
  space.recompute = {Recompute::none};
  const auto layouts = enumerate_layouts(w, 8, 8, space);
  std::set<std::pair<int, std::int64_t>> seen;
  for (const Layout& l : layouts) {
    EXPECT_TRUE(l.zero == ZeroStage::none || l.zero == ZeroStage::optimizer) << describe(l);
    EXPECT_TRUE(l.tp == 1 || l.tp == 2) << describe(l);
    EXPECT_EQ(l.recompute, Recompute::none);
    seen.insert({stage_number(l.zero), l.tp});
  }
  EXPECT_EQ(seen.size(), 4u);  // every combination of the listed values
}

TEST(Search, RanksFittingLayoutsFastestFirst) {
  const Workload w{.model = model_preset("llama-13b"), .global_batch = 256, .precision = Precision::bf16};
  Workload w2 = w;
  w2.model.seq_len = 2048;
  const SearchResult r = search_layouts(w2, preset("gaudi2"), 64, {.grids = false});
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_GT(r.enumerated, r.fitting);  // some layouts (tp 1, pp 1, no ZeRO) do not fit
  for (std::size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].time.total(), r.ranked[i].time.total());
  for (const Prediction& p : r.ranked) EXPECT_LE(p.memory.total(), 96e9);
  // 13B parameters x 18 bytes do not fit one 96 GB device without sharding.
  SearchSpace serialish;
  serialish.tp = {1};
  serialish.pp = {1};
  serialish.zero = {ZeroStage::none};
  EXPECT_EQ(search_layouts(w2, preset("gaudi2"), 64, serialish).fitting, 0);
}

// The Frontier study's best layouts (Dash et al.) rank among the planner's first three in the
// space the study searched (1F1B, activation checkpointing, no sequence parallelism).
TEST(Search, FrontierStudysBestLayoutsRankFirst) {
  SearchSpace study;
  study.schedule = {PipelineSchedule::one_f_one_b};
  study.recompute = {Recompute::full};
  study.sequence_parallel = {false};
  study.hsdp = {0};  // the study's Megatron-DeepSpeed had no hybrid sharding
  study.grids = false;  // nor 3D tensor grids
  auto rank_of = [&](const char* model, std::int64_t nodes, std::int64_t batch, Layout want) {
    Workload w{.model = model_preset(model), .global_batch = batch, .precision = Precision::fp16};
    w.model.seq_len = 2048;
    const SearchResult r = search_layouts(w, preset("frontier"), nodes * 8, study);
    for (std::size_t i = 0; i < r.ranked.size(); ++i) {
      const Layout& l = r.ranked[i].layout;
      if (l.tp == want.tp && l.pp == want.pp && l.micro_batch == want.micro_batch &&
          l.zero == want.zero)
        return static_cast<int>(i) + 1;
    }
    return -1;
  };
  const int r175 = rank_of("gpt-175b", 128, 640, {.tp = 4, .pp = 16, .micro_batch = 1, .zero = ZeroStage::optimizer});
  EXPECT_GE(r175, 1);
  EXPECT_LE(r175, 3);
  // One replica (dp 1): ZeRO-1 shards nothing, so the planner lists it as stage 0.
  EXPECT_EQ(rank_of("gpt-1t", 64, 1600, {.tp = 8, .pp = 64, .micro_batch = 1, .zero = ZeroStage::none}), 1);
}

TEST(Refit, RecoversComputeAndLinkFactors) {
  const ClusterSpec c = preset("dgx-a100-80gb");
  const Workload w{.model = model_preset("gpt-1.4b"), .global_batch = 32, .precision = Precision::bf16};
  std::vector<Measured> runs;
  for (Layout l : {Layout{.tp = 8, .micro_batch = 1}, Layout{.dp = 8, .micro_batch = 4},
                   Layout{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 2}}) {
    const Prediction p = predict(w, c, l);
    const TimePrediction& t = p.time;
    runs.push_back({p, 2.0 * (t.compute + t.bubble + t.optimizer) + 3.0 * (t.tp + t.pp + t.dp)});
  }
  const Refit r = refit_cluster(c, runs);
  ASSERT_TRUE(r.comm_fitted);
  EXPECT_NEAR(r.compute_factor, 2.0, 1e-6);
  EXPECT_NEAR(r.comm_factor, 3.0, 1e-6);
  EXPECT_NEAR(r.cluster.gemm_max_efficiency, c.gemm_max_efficiency / 2, 1e-9);
  // The refit cluster predicts the first run's compute twice as slow.
  const Prediction again = predict(w, r.cluster, runs[0].predicted.layout);
  EXPECT_NEAR(again.time.compute, 2 * runs[0].predicted.time.compute, 1e-9 * again.time.compute);
}

// A measured attention rate is part of the compute the refit scales: without it, the refit
// cluster would leave the attention core's time as it was.
TEST(Refit, AMeasuredAttentionRateTakesTheComputeFactor) {
  ClusterSpec c = preset("dgx-h100");
  c.devices_per_node = 1;
  c.attention_tflops = 6.0;
  const Workload w{.model = model_preset("gpt2"), .global_batch = 8};
  const Prediction p = predict(w, c, Layout{.micro_batch = 8});
  const TimePrediction& t = p.time;
  const Refit r = refit_cluster(c, {{p, 2.0 * (t.compute + t.bubble + t.optimizer)}});
  EXPECT_NEAR(r.compute_factor, 2.0, 1e-9);
  EXPECT_NEAR(r.cluster.attention_tflops, 3.0, 1e-9);
  const Prediction again = predict(w, r.cluster, p.layout);
  EXPECT_NEAR(again.time.compute, 2 * t.compute, 1e-9 * t.compute);
}

// A refit of garbage is refused, not written: a step time of 0, NaN or inf (a run whose metrics
// held none) made the factors, and the spec `tune` wrote, non-finite.
TEST(Refit, NonFiniteOrZeroStepTimesAreRefused) {
  const ClusterSpec c = preset("dgx-h100");
  const Workload w{.model = model_preset("gpt2"), .global_batch = 8};
  const Prediction p = predict(w, c, Layout{.dp = 8, .micro_batch = 1});
  for (double seconds : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    try {
      refit_cluster(c, {{p, seconds}});
      ADD_FAILURE() << "refit from a step of " << seconds << " s";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nothing is refit"), std::string::npos) << e.what();
    }
  }
  // A step so long that the factor overflows leaves an efficiency of 0: not a usable spec either.
  try {
    refit_cluster(c, {{p, 1e308}});
    ADD_FAILURE() << "refit from a step of 1e308 s";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a usable cluster spec"), std::string::npos)
        << e.what();
  }
}

TEST(Memory, BytesPerParameterOfMixedPrecisionTraining) {
  // bf16 weights, f32 gradients, f32 master weights and two moments: 2 + 4 + 12 = 18.
  EXPECT_DOUBLE_EQ(model_state_bytes(1, 0, 1, 2, 4, true).total(), 18);
  EXPECT_DOUBLE_EQ(model_state_bytes(1, 0, 1, 2, 2, true).total(), 16);  // the ZeRO paper's 16
  EXPECT_DOUBLE_EQ(model_state_bytes(1, 0, 1, 4, 4, false).total(), 16);
}

// Korthikanti et al.'s activations per layer with tensor and sequence parallelism,
// s b h (34/t + 5 a s / (h t)) bytes in 16 bits, less what kintsugi never stores: the two
// 1-byte dropout masks (2 s b h / t: no dropout) and the s x s attention matrices (the flash
// kernel keeps a log-sum-exp per row and head instead), plus the f32 norm statistics. Every
// term is divided by t: with sequence parallelism the norm outputs are kept as this rank's rows.
TEST(Memory, SequenceParallelActivationsAreKorthikantisPerLayer) {
  const ModelConfig m = model_preset("gpt-175b");
  const double s = 2048, b = 1, h = m.d_model, a = m.n_head, t = 8;
  ActivationShape shape{.micro_batch = 1, .seq = 2048, .tp = 8, .sequence_parallel = true,
                        .element_bytes = 2, .statistic_bytes = 4};
  const double stats = 2 * 2 * s * b / t * 4;  // two LayerNorms' means and inverse deviations
  const double lse = a * s * b / t * 4;
  EXPECT_DOUBLE_EQ(block_activation_bytes(m, shape), s * b * h * (34 - 2) / t + stats + lse);
  // Selective recomputation: the attention core's output and log-sum-exp are recomputed too.
  shape.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(block_activation_bytes(m, shape), s * b * h * (34 - 2 - 2) / t + stats);
  // 3.75 bytes per token and unit of hidden size at tp 8 (Megatron-LM's 4.25 with its masks
  // and kept attention output).
  EXPECT_NEAR((block_activation_bytes(m, shape) - stats) / (s * b * h), 3.75, 1e-12);
}

}  // namespace
}  // namespace kintsugi
