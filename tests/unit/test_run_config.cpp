// Run configs: presets, overrides, strict keys and validation messages.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/parallel_layout_json.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/train/model_fit.hpp"
#include "kintsugi/train/run_config.hpp"
#include "support/configs.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

using testing::run_config_error;

TEST(RunConfig, PresetThenOverrides) {
  auto c = load_run_config("", {"model.preset=\"gpt2\"", "model.n_layer=2", "train.lr=1e-3",
                                "data.train=some/path.bin", "train.save_checkpoint=false"});
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.data.train, "some/path.bin");  // bare strings need no quotes
  EXPECT_FALSE(c.train.save_checkpoint);
  EXPECT_EQ(c.train.decay_steps, 0);  // unset: the decay follows train.steps
  EXPECT_EQ(lr_schedule_of(c.train).decay_steps, c.train.steps);
}

// A model whose shape is not its preset's is named by family and size, not by the preset.
TEST(RunConfig, CustomModelsAreNamedByFamilyAndSize) {
  const RunConfig custom = load_run_config("", {"model.n_layer=2", "model.d_model=64"});
  EXPECT_EQ(custom.model.name.rfind("gpt2-", 0), 0u) << custom.model.name;
  EXPECT_NE(custom.model.name.find("M"), std::string::npos) << custom.model.name;
  EXPECT_EQ(load_run_config("", {"model.norm_eps=1e-6", "model.seq_len=64"}).model.name,
            "gpt-tiny");
  EXPECT_EQ(load_run_config("", {"model.preset=\"llama-tiny\""}).model.name, "llama-tiny");
}

// A short run is one flag: keys the user did not set follow train.steps (the decay ends at the
// last step, a longer warm-up is shortened with a note); only keys the user set conflict.
TEST(RunConfig, ShortRunsAreOneFlag) {
  const std::string tiny = testing::configs_dir() + "/gpt-tiny.toml";  // warm-up 10
  const RunConfig c = load_run_config(tiny, {"train.steps=4"});
  const LrSchedule s = lr_schedule_of(c.train);
  EXPECT_EQ(s.decay_steps, 4);
  EXPECT_EQ(s.warmup_steps, 4);
  ASSERT_EQ(config_notes(c).size(), 1u);
  EXPECT_NE(config_notes(c)[0].find("warming up over 4 steps"), std::string::npos);
  EXPECT_TRUE(config_notes(load_run_config(tiny, {})).empty());
  // Written back, the decay still follows train.steps.
  EXPECT_NE(run_config_toml(c).find("decay_steps = 0"), std::string::npos);
  std::string error;
  try {
    load_run_config(tiny, {"train.steps=4", "train.decay_steps=3"});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("train.decay_steps = 3 must be at least train.warmup_steps = 10"),
            std::string::npos);
  try {
    load_run_config(tiny, {"train.steps=0"});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("use `kintsugi eval`"), std::string::npos) << error;
}

TEST(RunConfig, IntegersAreAcceptedAsFloats) {
  EXPECT_DOUBLE_EQ(load_run_config("", {"train.lr=1"}).train.lr, 1.0);
}

TEST(RunConfig, ClearErrors) {
  EXPECT_NE(run_config_error({"train.lrr=1"}).find("unknown key `train.lrr`"), std::string::npos);
  EXPECT_NE(run_config_error({"train.steps=1.5"}).find("`train.steps` must be integer"),
            std::string::npos);
  EXPECT_NE(run_config_error({"train.global_batch=15"}).find("not a multiple of train.micro_batch"),
            std::string::npos);
  EXPECT_NE(run_config_error({"model.n_head=3"}).find("model.d_model = 128 is not divisible"),
            std::string::npos);
  EXPECT_NE(run_config_error({"model.preset=\"nope\""}).find("unknown model preset"),
            std::string::npos);
  EXPECT_NE(run_config_error({"train.min_lr=1"}).find("train.min_lr"), std::string::npos);
  EXPECT_NE(run_config_error({"trainlr=1"}).find("must name its section"), std::string::npos);
  EXPECT_NE(run_config_error({"train.steps=0"}).find("train.steps = 0 must be positive"),
            std::string::npos);
}

// TOML has inf and nan; no setting means either. A directory is not a config file.
// comm.backend: NCCL moves GPU memory only, and an unknown library is named.
TEST(RunConfig, CommBackendIsChecked) {
  EXPECT_NE(run_config_error({"comm.backend=\"nccl\""}).find("needs train.device = \"cuda\""),
            std::string::npos)
      << run_config_error({"comm.backend=\"nccl\""});
  EXPECT_NE(run_config_error({"comm.backend=\"gloo\""}).find("gloo"), std::string::npos)
      << run_config_error({"comm.backend=\"gloo\""});
  EXPECT_EQ(run_config_error({"comm.backend=\"mpi\""}), "");
}

TEST(RunConfig, NonFiniteNumbersAndDirectoriesAreRefused) {
  EXPECT_NE(run_config_error({"train.lr=inf"}).find("`train.lr` = inf must be a finite number"),
            std::string::npos);
  EXPECT_NE(run_config_error({"train.grad_clip=nan"})
                .find("`train.grad_clip` = nan must be a finite"),
            std::string::npos);
  EXPECT_NE(run_config_error({"comm.timeout_s=-inf"})
                .find("`comm.timeout_s` = -inf must be a finite"),
            std::string::npos);
  try {
    load_run_config(testing::configs_dir(), {});
    FAIL() << "a directory was accepted as a config file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory: name a .toml file"), std::string::npos)
        << e.what();
  }
}

TEST(RunConfig, EmptyAndAbsurdValuesAreRefused) {
  EXPECT_NE(run_config_error({"data.tokenizer=\"\""}).find("data.tokenizer is empty"),
            std::string::npos);
  EXPECT_NE(run_config_error({"model.n_layer=3000000000"})
                .find("model.n_layer = 3000000000 is more blocks than kintsugi numbers"),
            std::string::npos);
  EXPECT_NE(run_config_error({"train.steps=100000000000000000", "train.global_batch=1000"})
                .find("tokens is more than a run can count (2^63)"),
            std::string::npos);
  EXPECT_EQ(run_config_error({"train.steps=1000000000000"}), "");  // a long run is not absurd
}

// The model's state against the memory of its ranks, before anything is built per block
// (train/model_fit.hpp): a floor, so a model that fits is never refused.
TEST(RunConfig, ModelMustFitTheMachine) {
  auto fits = [](std::vector<std::string> overrides, int world, double memory, int sharing) {
    RunConfig c = load_run_config("", overrides);
    resolve_layout(c, world);
    try {
      check_model_fits(c, memory, sharing);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // gpt-tiny: 7.24M parameters of 16 bytes in fp32 with AdamW, 116 MB.
  EXPECT_EQ(fits({}, 1, 120e6, 1), "");
  EXPECT_NE(fits({}, 1, 110e6, 1).find("the model does not fit: its 7.24e+06 parameters"),
            std::string::npos)
      << fits({}, 1, 110e6, 1);
  // Four ranks on the machine share its memory; tp 2 x pp 2 gives each a quarter of the model.
  EXPECT_NE(fits({}, 1, 400e6, 4).find("for its 4 ranks"), std::string::npos);
  EXPECT_EQ(fits({"parallel.tp=2", "parallel.pp=2"}, 4, 120e6, 4), "");
  // ZeRO-3 over dp 4 shards all of it; ZeRO-1 only the optimizer's 8 of the 16 bytes.
  EXPECT_EQ(fits({"parallel.zero=3", "train.micro_batch=1"}, 4, 30e6, 1), "");
  EXPECT_NE(fits({"parallel.zero=1", "train.micro_batch=1"}, 4, 30e6, 1).find("ZeRO 1"),
            std::string::npos);
  // A billion layers: refused from the numbers alone, in no time and no memory.
  EXPECT_NE(fits({"model.n_layer=1000000000"}, 1, 1e12, 1).find("model.n_layer = 1000000000"),
            std::string::npos);
  EXPECT_EQ(fits({}, 1, 0, 1), "");  // unknown memory: nothing to check
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
  std::ifstream in(testing::configs_dir() + "/../docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& k : run_config_keys())
    EXPECT_NE(doc.find("`" + k.key + "`"), std::string::npos) << k.key << " is not documented";
}

TEST(RunConfig, ShippedConfigsLoad) {
  for (const char* name : {"gpt-tiny.toml", "llama-tiny.toml", "bloom-tiny.toml",
                           "llama3-tiny.toml", "mistral-tiny.toml", "qwen2-tiny.toml", "qwen3-tiny.toml",
                           "llama-13b.toml", "bloom-13b.toml",
                           "llama-3.1-8b-continued-pretraining.toml", "qwen2.5-7b-finetune.toml",
                           "moe-tiny.toml", "moe-deepseek-tiny.toml"})
    EXPECT_NO_THROW(load_run_config(testing::configs_dir() + "/" + name, {})) << name;
  // The newer families' tiny configs are what their names say.
  const std::string dir = testing::configs_dir();
  const ModelConfig mistral = load_run_config(dir + "/mistral-tiny.toml", {}).model;
  EXPECT_EQ(mistral.family, Family::mistral);
  EXPECT_EQ(mistral.sliding_window, 32);
  const ModelConfig qwen2 = load_run_config(dir + "/qwen2-tiny.toml", {}).model;
  EXPECT_TRUE(qwen2.qkv_bias() && !qwen2.has_biases() && qwen2.tied_embeddings());
  const ModelConfig llama3 = load_run_config(dir + "/llama3-tiny.toml", {}).model;
  EXPECT_EQ(llama3.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(llama3.head_dim(), 48);
  const ModelConfig qwen3 = load_run_config(dir + "/qwen3-tiny.toml", {}).model;
  EXPECT_TRUE(qwen3.qk_norm() && !qwen3.qkv_bias() && !qwen3.tied_embeddings());
  EXPECT_EQ(qwen3.head_dim(), 48);
}

// The published runs: Llama-13B as TP 4 x PP 2 x DP 8 on 64 ranks, BLOOM-13B as TP 4 x PP 2 x
// DP 16 on 128.
TEST(RunConfig, SeedLayoutsResolve) {
  const std::string dir = testing::configs_dir();
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
      testing::configs_dir() + "/llama-tiny.toml",
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
  EXPECT_NE(run_config_error({"data.train=[]"}).find("empty list"), std::string::npos);
  EXPECT_NE(run_config_error({"data.train=[\"a.bin\"]"}).find("must be a table with a path"),
            std::string::npos);
  EXPECT_NE(run_config_error({"data.train=[{ path = \"a.bin\", weight = 0 }]"})
                .find("must be positive"),
            std::string::npos);
  EXPECT_NE(run_config_error({"data.train=[{ path = \"a.bin\", wieght = 1 }]"}).find("`wieght`"),
            std::string::npos);
}

// "section.key" -> value text of a TOML file as run_config_toml writes it.
std::map<std::string, std::string> key_values(const std::string& toml) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// `plan --write-config` of a config with every key set to a non-default value changes nothing
// but the layout keys.
TEST(RunConfig, WrittenLayoutKeepsEveryOtherKey) {
  const std::vector<std::string> every_key = {
      "model.family=\"llama\"", "model.n_layer=6", "model.d_model=96", "model.n_head=6",
      "model.n_kv_head=3", "model.d_ff=200", "model.vocab_size=1000", "model.seq_len=48",
      "model.vocab_pad_multiple=64", "model.norm_eps=1e-6", "model.rope_theta=5e5",
      "model.sliding_window=16", "model.rope_scaling=\"yarn\"", "model.rope_factor=4",
      "model.rope_low_freq_factor=2", "model.rope_high_freq_factor=8",
      "model.rope_original_context=24", "model.rope_beta_fast=16", "model.rope_beta_slow=2",
      "model.rope_attention_factor=1.2", "model.head_dim=24", "model.tie_embeddings=\"tied\"",
      "model.init_std=0.01", "model.moe_experts=4", "model.moe_top_k=1",
      "model.moe_expert_hidden=64", "model.moe_shared_experts=1", "model.moe_shared_hidden=32",
      "model.moe_router_norm_topk=false", "model.moe_capacity_factor=1.25",
      "model.moe_router_score=\"sigmoid\"", "model.moe_routed_scaling_factor=2.5",
      "model.moe_router_groups=2", "model.moe_router_topk_groups=2",
      "model.moe_router_bias_update_rate=0.001",
      "model.moe_first_dense_layers=1", "model.moe_layer_freq=2", "model.moe_dense_layers=[3]",
      "data.train=\"a.bin\"", "data.val=\"b.bin\"",
      "data.tokenizer=\"tok\"", "data.document_attention=true", "data.eod_id=2",
      "train.steps=50", "train.global_batch=24", "train.micro_batch=3",
      "train.batch_rampup=[6, 6, 100]", "train.batch_lr_rule=\"sqrt\"",
      "train.lr=1e-3", "train.min_lr=1e-5", "train.warmup_steps=5", "train.decay_steps=40",
      "train.weight_decay=0.05", "train.beta1=0.8", "train.beta2=0.99", "train.eps=1e-6",
      "train.grad_clip=0.5", "train.moe_aux_loss_coeff=0.02", "train.moe_z_loss_coeff=0.001",
      "train.max_memory_gb=2", "train.seed=7", "train.eval_every=5", "train.eval_sequences=6",
      "train.lr_schedule=\"wsd\"", "train.lr_decay_fraction=0.3", "train.optimizer=\"lion\"",
      "train.log_every=3", "train.threads=2", "train.device=\"cuda\"", "train.precision=\"bf16\"",
      "train.grad_precision=\"param\"", "train.loss_scale=1024", "train.loss_scale_window=500",
      "train.recompute=\"selective\"", "train.save_checkpoint=false", "train.save_every=10",
      "train.keep_checkpoints=5", "parallel.tp=2", "parallel.dp=2", "parallel.pp=2",
      "parallel.schedule=\"interleaved\"", "parallel.virtual_stages=2",
      "parallel.layers_per_stage=[2, 1, 2, 1]", "parallel.sequence_parallel=true",
      "parallel.order=\"dp-tp-pp\"", "parallel.bucket_mib=10", "parallel.zero=1", "parallel.hsdp=2",
      "parallel.tensor_grid=[2, 1, 1]", "parallel.tensor_grid_overlap=false", "parallel.cp=2",
      "parallel.cp_comm=\"ring\"", "parallel.ep=2",
      "metrics.peak_gflops=123",
      "metrics.tensorboard_dir=\"tb\"", "comm.timeout_s=60",
      "comm.backend=\"mpi\"", "comm.deadlock_check_s=5"};
  const RunConfig c = load_run_config("", every_key);
  const auto set = key_values(run_config_toml(c));
  const auto defaults = key_values(run_config_toml(RunConfig{}));
  for (const auto& k : run_config_keys()) {
    // The deprecated key is written as the eval_sequences it means (EvalSequences tests).
    if (k.key == "model.preset" || k.key == "train.eval_batches") continue;
    ASSERT_TRUE(set.count(k.key)) << k.key << " is not written";
    EXPECT_NE(set.at(k.key), defaults.at(k.key)) << k.key << ": give it a non-default value here";
  }
  const Layout layout{.parallel = {.tp = 1, .pp = 1, .dp = 4, .zero = ZeroStage::parameters},
                      .micro_batch = 1,
                      .recompute = Recompute::full};
  const std::set<std::string> layout_keys = {
      "parallel.tp", "parallel.pp", "parallel.dp", "parallel.schedule", "parallel.virtual_stages",
      "parallel.layers_per_stage", "parallel.sequence_parallel", "parallel.zero", "parallel.hsdp",
      "parallel.tensor_grid", "parallel.cp", "parallel.ep", "train.micro_batch", "train.recompute"};
  const fs::path file =
      fs::temp_directory_path() / ("kintsugi-layout-" + std::to_string(getpid()) + ".toml");
  std::ofstream(file) << layout_config_toml(c, layout);
  const auto written = key_values(run_config_toml(load_run_config(file.string(), {})));
  fs::remove(file);
  for (const auto& [key, value] : set) {
    if (layout_keys.count(key)) continue;
    EXPECT_EQ(written.at(key), value) << key;
  }
  EXPECT_EQ(written.at("parallel.dp"), "4");
  EXPECT_EQ(written.at("parallel.zero"), "3");
  EXPECT_EQ(written.at("train.recompute"), "'full'");
}

// What a resume lists against the saved configuration (train/saved_config.hpp): every key of
// the table whose value differs, in the table's order, the deprecated key as the windows it
// means and a blend as one list.
TEST(RunConfig, ChangesAreListedKeyByKey) {
  const RunConfig a = load_run_config("", {"model.seq_len=32", "train.eval_sequences=6",
                                           "train.micro_batch=2"});
  const RunConfig b = load_run_config("", {"model.seq_len=64", "train.eval_batches=3",
                                           "train.micro_batch=2", "train.lr=1e-3"});
  EXPECT_TRUE(config_changes(a, a).empty());
  const auto changes = config_changes(a, b);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "model.seq_len");
  EXPECT_EQ(changes[0].before, "32");
  EXPECT_EQ(changes[0].after, "64");
  EXPECT_EQ(changes[1].key, "train.lr");
  EXPECT_EQ(changes[1].before, "0.0006");
  EXPECT_EQ(changes[1].after, "0.001");
  const RunConfig blend = load_run_config(
      "", {"data.train=[{ path = \"a.bin\", weight = 1 }, { path = \"b.bin\", weight = 2 }]"});
  const auto blended = config_changes(a, blend);
  ASSERT_EQ(blended.size(), 3u);  // seq_len, the data and eval_sequences
  EXPECT_EQ(blended[1].key, "data.train");
  EXPECT_EQ(blended[1].before, "\"data/brown/train.bin\"");
  EXPECT_EQ(blended[1].after,
            "[{ path = \"a.bin\", weight = 1 }, { path = \"b.bin\", weight = 2 }]");
}

// A written config shows each float as the shortest text that reads back to the same double
// (0.55, not 0.55000000000000004), and strings that look like numbers are left as they are.
TEST(RunConfig, WrittenFloatsAreShortestAndExact) {
  const RunConfig c = load_run_config(
      "", {"train.grad_clip=0.55", "train.weight_decay=0.037", "train.lr=3e-4",
           "model.norm_eps=1e-5", "train.beta2=0.95", "train.loss_scale=65536",
           "data.train=\"0.55000000000000004.bin\""});
  const auto written = key_values(run_config_toml(c));
  EXPECT_EQ(written.at("train.grad_clip"), "0.55");
  EXPECT_EQ(written.at("train.weight_decay"), "0.037");
  EXPECT_EQ(written.at("train.lr"), "3e-04");
  EXPECT_EQ(written.at("train.beta2"), "0.95");
  EXPECT_EQ(written.at("model.norm_eps"), "1e-05");
  EXPECT_EQ(written.at("train.loss_scale"), "65536.0");
  EXPECT_NE(written.at("data.train").find("0.55000000000000004.bin"), std::string::npos);
  const fs::path file =
      fs::temp_directory_path() / ("kintsugi-floats-" + std::to_string(getpid()) + ".toml");
  std::ofstream(file) << run_config_toml(c);
  const RunConfig back = load_run_config(file.string(), {});
  fs::remove(file);
  EXPECT_EQ(back.train.grad_clip, c.train.grad_clip);
  EXPECT_EQ(back.train.weight_decay, c.train.weight_decay);
  EXPECT_EQ(back.train.lr, c.train.lr);
  EXPECT_EQ(back.model.norm_eps, c.model.norm_eps);
  EXPECT_EQ(back.train.loss_scale, c.train.loss_scale);
  EXPECT_EQ(back.data.train, c.data.train);
}

// The runtime and the planner judge layouts by one rule book: over a grid of layouts, a config
// resolves exactly when the planner's layout_problem is empty.
// Whether the runtime accepts the config's layout on `world` ranks, and the planner's problem
// with it (empty: none).
std::pair<bool, std::string> runtime_and_planner(RunConfig c, int world) {
  bool runtime_ok = true;
  try {
    resolve_layout(c, world);
  } catch (const Error&) {
    runtime_ok = false;
  }
  return {runtime_ok, layout_problem(workload_of(c), layout_of(c))};
}

TEST(RunConfig, RuntimeAndPlannerAgreeOnEveryLayout) {
  const RunConfig base = load_run_config("", {"model.preset=\"llama-tiny\"", "train.global_batch=8",
                                              "train.micro_batch=2"});
  int valid = 0, invalid = 0;
  for (std::int64_t tp : {1, 2, 3, 4})
    for (std::int64_t pp : {1, 2, 3})
      for (std::int64_t dp : {1, 2, 4})
        for (std::int64_t cp : {1, 2, 3})
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
                c.parallel.cp = cp;
                c.parallel.zero = static_cast<ZeroStage>(zero);
                c.parallel.hsdp = hsdp;
                c.parallel.schedule = schedule;
                c.parallel.virtual_stages = v;
                c.parallel.sequence_parallel = sp;
                const auto [runtime_ok, planner] =
                    runtime_and_planner(c, static_cast<int>(tp * pp * dp * cp));
                EXPECT_EQ(runtime_ok, planner.empty())
                    << "tp " << tp << " pp " << pp << " dp " << dp << " cp " << cp << " zero "
                    << zero << " hsdp "
                    << hsdp << " " << name_of(schedule) << " v " << v << " sp " << sp << ": "
                    << planner;
                (runtime_ok ? valid : invalid)++;
              }
  EXPECT_GT(valid, 50);
  EXPECT_GT(invalid, 50);
}

// Expert parallelism (docs/moe.md) on a mixture of 4 experts: ep must divide dp and the
// experts, and refuses hybrid sharding; the runtime and the planner agree on every layout.
TEST(RunConfig, RuntimeAndPlannerAgreeOnExpertLayouts) {
  const RunConfig base = load_run_config(
      "", {"model.preset=\"llama-tiny\"", "model.moe_experts=4", "train.global_batch=8",
           "train.micro_batch=1"});
  int valid = 0, invalid = 0;
  for (std::int64_t tp : {1, 2})
    for (std::int64_t pp : {1, 2})
      for (std::int64_t dp : {1, 2, 4, 8})
        for (std::int64_t ep : {1, 2, 3, 4, 8})
          for (int zero : {0, 1, 3})
            for (std::int64_t hsdp : {0, 2}) {
              RunConfig c = base;
              c.parallel = {.tp = tp, .pp = pp, .dp = dp, .zero = static_cast<ZeroStage>(zero),
                            .hsdp = hsdp, .ep = ep};
              const auto [ok, planner] = runtime_and_planner(c, static_cast<int>(tp * pp * dp));
              EXPECT_EQ(ok, planner.empty()) << layout_json(c.parallel).dump() << ": " << planner;
              (ok ? valid : invalid)++;
            }
  EXPECT_GT(valid, 20);
  EXPECT_GT(invalid, 20);
}

}  // namespace
}  // namespace kintsugi
