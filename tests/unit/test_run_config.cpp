// Run configs: presets, overrides, strict keys and validation messages.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    load_run_config("", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunConfig, PresetThenOverrides) {
  auto c = load_run_config("", {"model.preset=\"gpt2\"", "model.n_layer=2", "train.lr=1e-3",
                                "data.train=some/path.bin", "train.save_checkpoint=false"});
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.data.train, "some/path.bin");  // bare strings need no quotes
  EXPECT_FALSE(c.train.save_checkpoint);
  EXPECT_EQ(c.train.decay_steps, c.train.steps);  // 0 means "the last step"
}

TEST(RunConfig, IntegersAreAcceptedAsFloats) {
  EXPECT_DOUBLE_EQ(load_run_config("", {"train.lr=1"}).train.lr, 1.0);
}

TEST(RunConfig, ClearErrors) {
  EXPECT_NE(error_of({"train.lrr=1"}).find("unknown key `train.lrr`"), std::string::npos);
  EXPECT_NE(error_of({"train.steps=1.5"}).find("`train.steps` must be integer"), std::string::npos);
  EXPECT_NE(error_of({"train.global_batch=15"}).find("not a multiple of train.micro_batch"),
            std::string::npos);
  EXPECT_NE(error_of({"model.n_head=3"}).find("model.d_model = 128 is not divisible"),
            std::string::npos);
  EXPECT_NE(error_of({"model.preset=\"nope\""}).find("unknown model preset"), std::string::npos);
  EXPECT_NE(error_of({"train.min_lr=1"}).find("train.min_lr"), std::string::npos);
  EXPECT_NE(error_of({"trainlr=1"}).find("must name its section"), std::string::npos);
  EXPECT_NE(error_of({"train.steps=0"}).find("train.steps = 0 must be positive"),
            std::string::npos);
}

// TOML has inf and nan; no setting means either. A directory is not a config file.
TEST(RunConfig, NonFiniteNumbersAndDirectoriesAreRefused) {
  EXPECT_NE(error_of({"train.lr=inf"}).find("`train.lr` = inf must be a finite number"),
            std::string::npos);
  EXPECT_NE(error_of({"train.grad_clip=nan"}).find("`train.grad_clip` = nan must be a finite"),
            std::string::npos);
  EXPECT_NE(error_of({"comm.timeout_s=-inf"}).find("`comm.timeout_s` = -inf must be a finite"),
            std::string::npos);
  try {
    load_run_config(KINTSUGI_CONFIGS_DIR, {});
    FAIL() << "a directory was accepted as a config file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory: name a .toml file"), std::string::npos)
        << e.what();
  }
}

TEST(RunConfig, FileErrorsNameTheLine) {
  const std::string path = ::testing::TempDir() + "/bad.toml";
  std::ofstream(path) << "[train]\nsteps = = 3\n";
  try {
    load_run_config(path, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.toml:2"), std::string::npos) << e.what();
  }
}

TEST(RunConfig, EveryKeyIsDocumented) {
  std::ifstream in(std::string(KINTSUGI_CONFIGS_DIR) + "/../docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& k : run_config_keys())
    EXPECT_NE(doc.find("`" + k.key + "`"), std::string::npos) << k.key << " is not documented";
}

TEST(RunConfig, ShippedConfigsLoad) {
  for (const char* name : {"gpt-tiny.toml", "llama-tiny.toml", "bloom-tiny.toml",
                           "llama-13b.toml", "bloom-13b.toml"})
    EXPECT_NO_THROW(load_run_config(std::string(KINTSUGI_CONFIGS_DIR) + "/" + name, {})) << name;
}

// The seeds' runs: Llama-13B as TP 4 x PP 2 x DP 8 on 64 ranks, BLOOM-13B as TP 4 x PP 2 x
// DP 16 on 128.
TEST(RunConfig, SeedLayoutsResolve) {
  const std::string dir = KINTSUGI_CONFIGS_DIR;
  RunConfig llama = load_run_config(dir + "/llama-13b.toml", {});
  EXPECT_NO_THROW(resolve_layout(llama, 64));
  EXPECT_EQ(llama.model.family, Family::llama);
  EXPECT_EQ(llama.train.precision, Precision::bf16);
  RunConfig bloom = load_run_config(dir + "/bloom-13b.toml", {});
  EXPECT_NO_THROW(resolve_layout(bloom, 128));
  EXPECT_EQ(bloom.model.family, Family::bloom);
  EXPECT_THROW(resolve_layout(bloom, 64), Error);  // dp 16 needs 128 ranks
}

TEST(RunConfig, KvHeadsMustSplitAcrossTensorParallelRanks) {
  RunConfig c = load_run_config("", {"model.preset=\"llama-tiny\"", "parallel.tp=4"});
  try {
    resolve_layout(c, 4);
    FAIL() << "tp 4 with 2 kv heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head = 2 is not divisible by tp = 4"),
              std::string::npos)
        << e.what();
  }
  c = load_run_config("", {"model.preset=\"llama-tiny\"", "parallel.tp=2"});
  EXPECT_NO_THROW(resolve_layout(c, 2));
}

// Enumerations are parsed once, at load; a wrong name lists the right ones.
TEST(RunConfig, EnumerationsAreParsedOnceWithTheirNames) {
  const RunConfig c = load_run_config(
      "", {"train.precision=\"bf16\"", "train.recompute=\"selective\"",
           "train.grad_precision=\"param\"", "parallel.schedule=\"interleaved\"",
           "parallel.zero=2", "model.family=\"bloom\"", "train.device=\"cpu\""});
  EXPECT_EQ(c.train.precision, Precision::bf16);
  EXPECT_EQ(c.train.recompute, Recompute::selective);
  EXPECT_EQ(c.train.grad_precision, GradPrecision::param);
  EXPECT_EQ(c.parallel.schedule, PipelineSchedule::interleaved);
  EXPECT_EQ(c.parallel.zero, ZeroStage::gradients);
  EXPECT_EQ(c.model.family, Family::bloom);
  try {
    load_run_config("", {"parallel.schedule=\"zigzag\""});
    FAIL() << "an unknown schedule was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "parallel.schedule = \"zigzag\": use \"gpipe\", \"1f1b\" or \"interleaved\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_run_config("", {"parallel.zero=4"}), Error);
  EXPECT_THROW(load_run_config("", {"train.device=\"tpu\""}), Error);
}

// Every key written out reads back to the same value, including ones far from their defaults.
TEST(RunConfig, TomlRoundTripKeepsEveryKey) {
  const RunConfig c = load_run_config(
      std::string(KINTSUGI_CONFIGS_DIR) + "/llama-tiny.toml",
      {"train.weight_decay=0.03", "train.grad_clip=0.7", "train.beta1=0.8", "train.beta2=0.99",
       "train.eps=1e-6", "train.decay_steps=77", "train.save_every=9", "train.keep_checkpoints=5",
       "train.threads=3", "train.loss_scale=1024", "train.precision=\"fp16\"",
       "model.init_std=0.01", "model.norm_eps=1e-6", "model.rope_theta=500000",
       "parallel.pp=2", "parallel.layers_per_stage=[3, 1]", "metrics.peak_gflops=123.5",
       "data.train=\"a path with \\\"quotes\\\".bin\""});
  const fs::path file = fs::temp_directory_path() / ("kintsugi-roundtrip-" + std::to_string(getpid()) + ".toml");
  std::ofstream(file) << run_config_toml(c);
  const RunConfig back = load_run_config(file.string(), {});
  fs::remove(file);
  EXPECT_EQ(run_config_toml(back), run_config_toml(c));
  EXPECT_EQ(back.model.name, c.model.name);
  EXPECT_EQ(back.train.weight_decay, 0.03);
  EXPECT_EQ(back.parallel.layers_per_stage, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(back.data.train, c.data.train);
  EXPECT_EQ(back.train.precision, Precision::fp16);
}

// data.train as a list of datasets: read, written back, and bad entries refused by name.
TEST(RunConfig, BlendsOfDatasets) {
  const RunConfig c = load_run_config(
      "", {"data.train=[{ path = \"a.bin\", weight = 0.3, val = \"a_val.bin\" }, "
           "{ path = \"b.bin\", weight = 7 }]"});
  ASSERT_EQ(c.data.blend.size(), 2u);
  EXPECT_EQ(c.data.blend[0].path, "a.bin");
  EXPECT_DOUBLE_EQ(c.data.blend[0].weight, 0.3);
  EXPECT_EQ(c.data.blend[0].val, "a_val.bin");
  EXPECT_DOUBLE_EQ(c.data.blend[1].weight, 7);  // integers are weights too
  EXPECT_EQ(c.data.blend[1].val, "");
  const fs::path file =
      fs::temp_directory_path() / ("kintsugi-blend-" + std::to_string(getpid()) + ".toml");
  std::ofstream(file) << run_config_toml(c);
  const RunConfig back = load_run_config(file.string(), {});
  // An override of data.train by one path replaces the file's blend.
  const RunConfig single = load_run_config(file.string(), {"data.train=\"c.bin\""});
  fs::remove(file);
  EXPECT_EQ(run_config_toml(back), run_config_toml(c));
  EXPECT_TRUE(single.data.blend.empty());
  EXPECT_EQ(single.data.train, "c.bin");
  EXPECT_NE(error_of({"data.train=[]"}).find("empty list"), std::string::npos);
  EXPECT_NE(error_of({"data.train=[\"a.bin\"]"}).find("must be a table with a path"),
            std::string::npos);
  EXPECT_NE(error_of({"data.train=[{ path = \"a.bin\", weight = 0 }]"}).find("must be positive"),
            std::string::npos);
  EXPECT_NE(error_of({"data.train=[{ path = \"a.bin\", wieght = 1 }]"}).find("`wieght`"),
            std::string::npos);
}

// The runtime and the planner judge layouts by one rule book: over a grid of layouts, a config
// resolves exactly when the planner's layout_problem is empty.
TEST(RunConfig, RuntimeAndPlannerAgreeOnEveryLayout) {
  const RunConfig base = load_run_config("", {"model.preset=\"llama-tiny\"", "train.global_batch=8",
                                              "train.micro_batch=2"});
  int valid = 0, invalid = 0;
  for (std::int64_t tp : {1, 2, 3, 4})
    for (std::int64_t pp : {1, 2, 3})
      for (std::int64_t dp : {1, 2, 4})
        for (int zero = 0; zero <= 3; ++zero)
          for (std::int64_t hsdp : {0, 2})
            for (auto [schedule, v] : {std::pair{PipelineSchedule::one_f_one_b, 1},
                                       std::pair{PipelineSchedule::gpipe, 1},
                                       std::pair{PipelineSchedule::interleaved, 2}})
              for (bool sp : {false, true}) {
                RunConfig c = base;
                c.parallel.tp = tp;
                c.parallel.pp = pp;
                c.parallel.dp = dp;
                c.parallel.zero = static_cast<ZeroStage>(zero);
                c.parallel.hsdp = hsdp;
                c.parallel.schedule = schedule;
                c.parallel.virtual_stages = v;
                c.parallel.sequence_parallel = sp;
                bool runtime_ok = true;
                try {
                  resolve_layout(c, static_cast<int>(tp * pp * dp));
                } catch (const Error&) {
                  runtime_ok = false;
                }
                const std::string planner = layout_problem(workload_of(c), layout_of(c));
                EXPECT_EQ(runtime_ok, planner.empty())
                    << "tp " << tp << " pp " << pp << " dp " << dp << " zero " << zero << " hsdp "
                    << hsdp << " " << name_of(schedule) << " v " << v << " sp " << sp << ": "
                    << planner;
                (runtime_ok ? valid : invalid)++;
              }
  EXPECT_GT(valid, 50);
  EXPECT_GT(invalid, 50);
}

}  // namespace
}  // namespace kintsugi
