// Training a mixture of experts (docs/moe.md): configs/moe-tiny.toml, cut small, learns the
// Brown corpus, reports its losses and expert loads, and a second run gives the same bits; and
// what is not built yet is refused in one line before any work.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "brown_data.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/train/trainer.hpp"
#include "scratch_dir.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

RunConfig moe_config(std::vector<std::string> extra = {}) {
  // The model cut to 2 layers of 64 on sequences of 32, experts of 32; 16 steps of 8 sequences.
  std::vector<std::string> o = brown_overrides();
  o.insert(o.end(), {"model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.n_kv_head=2",
                     "model.seq_len=32", "model.moe_expert_hidden=32", "train.global_batch=8",
                     "train.micro_batch=2", "train.steps=16", "train.warmup_steps=2",
                     "train.eval_every=8", "train.eval_sequences=16", "train.log_every=16",
                     "train.save_checkpoint=false"});
  o.insert(o.end(), extra.begin(), extra.end());
  return load_run_config(testing::configs_dir() + "/moe-tiny.toml", o);
}

std::vector<nlohmann::json> steps_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j);
  }
  return steps;
}

// Two runs of `config`, each step's metrics; the first must learn (validation loss down 0.5).
std::vector<std::vector<nlohmann::json>> train_twice(const RunConfig& config,
                                                     const std::string& name) {
  std::vector<std::vector<nlohmann::json>> runs;
  for (int run = 0; run < 2; ++run) {
    const ScratchDir out(name + std::to_string(run));
    std::ostringstream log;
    const TrainSummary s = train(config, {.out_dir = out.path().string()}, log);
    if (run == 0) EXPECT_LT(s.last_val_loss, s.first_val_loss - 0.5) << log.str();
    runs.push_back(steps_of(s.metrics_path));
  }
  return runs;
}

TEST(MoeTraining, LearnsReportsAndRepeatsBitForBit) {
  const ModelConfig shipped = load_run_config(testing::configs_dir() + "/moe-tiny.toml", {}).model;
  EXPECT_EQ(shipped.moe.experts, 8);
  EXPECT_EQ(shipped.moe.top_k, 2);
  const RunConfig config = moe_config();
  const auto runs = train_twice(config, "moe-training-");
  ASSERT_EQ(runs[0].size(), 16u);
  ASSERT_EQ(runs[1].size(), 16u);
  const std::int64_t k = config.model.moe.top_k, e = config.model.moe.experts;
  // Token choices per step: global batch x seq x top_k, spread over the experts.
  const double mean = 8.0 * 32.0 * static_cast<double>(k) / static_cast<double>(e);
  for (std::size_t i = 0; i < runs[0].size(); ++i) {
    const nlohmann::json& a = runs[0][i];
    EXPECT_EQ(a.at("loss").get<double>(), runs[1][i].at("loss").get<double>()) << i;
    EXPECT_EQ(a.at("moe_aux_loss").get<double>(), runs[1][i].at("moe_aux_loss").get<double>());
    // 1 when the experts are balanced; a few steps in, near it.
    EXPECT_GT(a.at("moe_aux_loss").get<double>(), 0.5);
    EXPECT_LT(a.at("moe_aux_loss").get<double>(), 2.0);
    EXPECT_GT(a.at("moe_z_loss").get<double>(), 0.0);
    const auto& load = a.at("moe_expert_load");
    ASSERT_EQ(load.size(), 2u);  // one per layer
    for (const auto& layer : load) {
      EXPECT_DOUBLE_EQ(layer.at("mean").get<double>(), mean);
      EXPECT_GE(layer.at("max").get<double>(), mean);
    }
  }
}

// The load-balancing loss is in the objective: a large coefficient balances the experts
// (the most loaded expert's share falls) against a run without it.
TEST(MoeTraining, AuxLossBalancesTheExperts) {
  double worst[2] = {0, 0};
  int run = 0;
  for (const char* coeff : {"train.moe_aux_loss_coeff=0", "train.moe_aux_loss_coeff=1"}) {
    const ScratchDir out(std::string("moe-aux-") + std::to_string(run));
    std::ostringstream log;
    const TrainSummary s = train(moe_config({coeff, "train.steps=24", "train.eval_every=0"}),
                                 {.out_dir = out.path().string()}, log);
    const auto steps = steps_of(s.metrics_path);
    ASSERT_FALSE(steps.empty());
    worst[run++] = steps.back().at("moe_aux_loss").get<double>();
  }
  EXPECT_LT(worst[1], worst[0]);
}

// DeepSeek-style routing (configs/moe-deepseek-tiny.toml, cut as moe_config cuts moe-tiny):
// sigmoid scores, 4 groups of 2 (2 kept), top 2 scaled by 2.5, a shared expert and the
// auxiliary-loss-free bias. It learns, the bias moves by the rate each step (every expert
// above or below the mean: |bias| grows by at most the rate a step), the load-balancing loss
// is reported over the normalized scores, and a second run gives the same bits.
TEST(MoeTraining, DeepSeekRoutingLearnsAndBalancesBitForBit) {
  const ModelConfig shipped =
      load_run_config(testing::configs_dir() + "/moe-deepseek-tiny.toml", {}).model;
  EXPECT_EQ(shipped.moe.score, RouterScore::sigmoid);
  EXPECT_EQ(shipped.moe.groups, 4);
  EXPECT_EQ(shipped.moe.topk_groups, 2);
  EXPECT_EQ(shipped.moe.routed_scaling, 2.5);
  EXPECT_EQ(shipped.moe.bias_update_rate, 1e-3);
  const RunConfig config = moe_config({"model.moe_router_score=\"sigmoid\"",
                                 "model.moe_routed_scaling_factor=2.5", "model.moe_router_groups=4",
                                 "model.moe_router_topk_groups=2", "model.moe_shared_experts=1",
                                 "model.moe_router_bias_update_rate=1e-3",
                                 "train.moe_aux_loss_coeff=0.0001"});
  const auto runs = train_twice(config, "moe-deepseek-");
  ASSERT_EQ(runs[0].size(), 16u);
  ASSERT_EQ(runs[1].size(), 16u);
  double last = 0;
  for (std::size_t i = 0; i < runs[0].size(); ++i) {
    const nlohmann::json& a = runs[0][i];
    EXPECT_EQ(a.at("loss").get<double>(), runs[1][i].at("loss").get<double>()) << i;
    EXPECT_EQ(a.at("moe_router_bias_max_abs").get<double>(),
              runs[1][i].at("moe_router_bias_max_abs").get<double>());
    const double bias = a.at("moe_router_bias_max_abs").get<double>();
    // An expert's bias moves by exactly the rate (or not at all) each step.
    EXPECT_LE(bias, last + 1e-3 * (1 + 1e-6)) << i;
    EXPECT_GE(bias, i == 0 ? 1e-3 * (1 - 1e-6) : 0.0) << i;
    last = bias;
    EXPECT_GT(a.at("moe_aux_loss").get<double>(), 0.5);
    EXPECT_LT(a.at("moe_aux_loss").get<double>(), 2.0);
  }
  EXPECT_GT(last, 1e-3);  // the bias accumulated over the steps
}

// Which blocks are MoE blocks (docs/moe.md, "Dense blocks"): Qwen2-MoE's rule from block
// model.moe_first_dense_layers on, less model.moe_dense_layers.
TEST(MoeTraining, DenseBlocksFollowTheDocumentedRule) {
  auto pattern = [](std::int64_t first, std::int64_t freq, std::vector<std::int64_t> dense) {
    ModelConfig c = load_run_config(testing::configs_dir() + "/moe-tiny.toml", {}).model;
    c.n_layer = 6;
    c.moe.first_dense = first;
    c.moe.layer_freq = freq;
    c.moe.dense_layers = std::move(dense);
    std::string s;
    for (int i = 0; i < c.n_layer; ++i) s += c.is_moe_block(i) ? 'M' : 'D';
    return s;
  };
  EXPECT_EQ(pattern(0, 1, {}), "MMMMMM");  // the defaults: every block (Mixtral)
  EXPECT_EQ(pattern(1, 1, {}), "DMMMMM");  // DeepSeek's first_k_dense_replace = 1
  EXPECT_EQ(pattern(0, 2, {}), "DMDMDM");  // Qwen2-MoE's decoder_sparse_step = 2
  EXPECT_EQ(pattern(1, 2, {}), "DDMDMD");  // the step counted from the first MoE candidate
  EXPECT_EQ(pattern(0, 1, {0, 4}), "DMMMDM");  // Qwen2-MoE's mlp_only_layers = [0, 4]
  // The counts the planner sums (model/block_inventory.hpp's block_kinds).
  ModelConfig c = moe_config({"model.n_layer=4", "model.moe_first_dense_layers=1",
                              "model.moe_layer_freq=2"}).model;
  EXPECT_EQ(c.moe_blocks(), 1);
  EXPECT_EQ(c.moe_blocks(2, 2), 1);
  EXPECT_EQ(c.moe_blocks(0, 2), 0);
  const auto kinds = block_kinds(c, 1, 3);
  EXPECT_EQ(kinds[0].index, 0);
  EXPECT_EQ(kinds[0].count, 2);
  EXPECT_EQ(kinds[1].index, 2);
  EXPECT_EQ(kinds[1].count, 1);
}

// A model with dense blocks trains, and reports its one MoE layer's load.
TEST(MoeTraining, DenseFirstBlocksTrainAndReportTheirMoeLayers) {
  const RunConfig config =
      moe_config({"model.n_layer=4", "model.moe_first_dense_layers=1", "model.moe_layer_freq=2",
                  "train.eval_every=16", "train.save_checkpoint=true"});
  const ScratchDir out("moe-training-dense");
  std::ostringstream log;
  const TrainSummary s = train(config, {.out_dir = out.path().string()}, log);
  EXPECT_LT(s.last_val_loss, s.first_val_loss - 0.5) << log.str();
  const auto steps = steps_of(s.metrics_path);
  ASSERT_EQ(steps.size(), 16u);
  for (const auto& step : steps) {
    ASSERT_EQ(step.at("moe_expert_load").size(), 1u);  // block 2 alone
    EXPECT_GT(step.at("moe_aux_loss").get<double>(), 0.5);
  }
  // Its checkpoint names the dense blocks' MLP and the MoE block's experts.
  std::ifstream manifest(out.path() / "model" / "manifest.json");
  std::stringstream text;
  text << manifest.rdbuf();
  EXPECT_NE(text.str().find("blocks.1.mlp.gate.weight"), std::string::npos);
  EXPECT_NE(text.str().find("blocks.2.moe.experts.7.w2.weight"), std::string::npos);
  EXPECT_EQ(text.str().find("blocks.3.moe."), std::string::npos);
}

void expect_refused(std::vector<std::string> overrides, int world, const std::string& words) {
  try {
    RunConfig c = moe_config(std::move(overrides));
    validate(c);
    resolve_layout(c, world);
    ADD_FAILURE() << "accepted; expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(MoeTraining, WhatIsNotBuiltIsRefusedInOneLine) {
  expect_refused({"model.moe_top_k=9"}, 1, "model.moe_top_k = 9 must be between 1 and");
  expect_refused({"model.moe_experts=-1"}, 1, "model.moe_experts = -1 must not be negative");
  expect_refused({"model.family=\"gpt2\""}, 1, "needs SwiGLU experts");
  expect_refused({"model.moe_shared_hidden=8"}, 1, "needs model.moe_shared_experts >= 1");
  expect_refused({"parallel.tp=2"}, 2, "under tensor parallelism (tp = 2) need sequence parallelism");
  expect_refused({"parallel.tp=2", "parallel.tensor_grid=[1, 2, 1]"}, 2, "do not run on the 3D tensor grid");
  expect_refused({"parallel.cp=2", "model.moe_capacity_factor=1"}, 2,
                 "model.moe_capacity_factor = 1 with --cp 2");
  expect_refused({"train.moe_aux_loss_coeff=-1"}, 1, "must not be negative");
  // DeepSeek-style routing's bad input.
  expect_refused({"model.moe_router_groups=3"}, 1, "model.moe_router_groups = 3 must divide");
  expect_refused({"model.moe_router_groups=4", "model.moe_router_topk_groups=5"}, 1,
                 "model.moe_router_topk_groups = 5 must be between 1 and model.moe_router_groups");
  expect_refused({"model.moe_router_groups=4", "model.moe_router_topk_groups=0"}, 1,
                 "model.moe_router_topk_groups = 0 must be between 1");
  expect_refused({"model.moe_router_groups=8", "model.moe_router_topk_groups=1"}, 1,
                 "model.moe_top_k = 2 exceeds the 1 experts of the");
  expect_refused({"model.moe_routed_scaling_factor=0"}, 1,
                 "model.moe_routed_scaling_factor = 0 must be positive");
  expect_refused({"model.moe_router_bias_update_rate=-0.1"}, 1,
                 "model.moe_router_bias_update_rate = -0.1 must not be negative");
  expect_refused({"model.moe_router_score=\"relu\""}, 1, "relu");
  // --init-from's weights carry no balancing bias: eval refuses such a model there (the saved
  // model and training checkpoints hold it: mpi.moeds_saved_model_keeps_bias).
  EXPECT_NO_THROW(refuse_router_bias_inference(moe_config().model, "eval --init-from"));
  try {
    refuse_router_bias_inference(moe_config({"model.moe_router_bias_update_rate=1e-3"}).model,
                                 "eval --init-from");
    ADD_FAILURE() << "accepted a model with a balancing bias";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kintsugi eval --init-from of a model with "
                                         "model.moe_router_bias_update_rate = 0.001: the"),
              std::string::npos)
        << e.what();
  }
  // Dense blocks (docs/moe.md, "Dense blocks").
  expect_refused({"model.moe_first_dense_layers=2"}, 1,
                 "model.moe_first_dense_layers = 2 must be between 0 and model.n_layer - 1 = 1");
  expect_refused({"model.moe_first_dense_layers=-1"}, 1, "must be between 0 and");
  expect_refused({"model.moe_layer_freq=0"}, 1, "model.moe_layer_freq = 0 must be at least 1");
  expect_refused({"model.moe_dense_layers=[2]"}, 1,
                 "model.moe_dense_layers = [2] names block 2, which model.n_layer = 2 does not have");
  expect_refused({"model.moe_layer_freq=3"}, 1, "leave no MoE block among the 2 blocks");
  expect_refused({"model.moe_experts=0", "model.moe_first_dense_layers=1"}, 1,
                 "they need model.moe_experts > 0");
}

}  // namespace
}  // namespace kintsugi
