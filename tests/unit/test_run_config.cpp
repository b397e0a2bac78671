// Run configs: presets, overrides, strict keys and validation messages.
#include <gtest/gtest.h>

#include <fstream>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi {
namespace {

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
  EXPECT_EQ(llama.model.family, "llama");
  EXPECT_EQ(llama.train.precision, "bf16");
  RunConfig bloom = load_run_config(dir + "/bloom-13b.toml", {});
  EXPECT_NO_THROW(resolve_layout(bloom, 128));
  EXPECT_EQ(bloom.model.family, "bloom");
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

}  // namespace
}  // namespace kintsugi
