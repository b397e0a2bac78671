// How blocks are split into pipeline stages.
#include <gtest/gtest.h>

#include <numeric>

#include "kintsugi/core/error.hpp"
#include "kintsugi/parallel/stage_partition.hpp"

namespace kintsugi {
namespace {

TEST(StagePartition, BalancesTheHeadOfTheLastStage) {
  // GPT-2 124M: the LM head costs about 5.4 blocks, so the last of 2 stages gets fewer blocks.
  const auto p = partition_stages(model_preset("gpt2"), 2, 1, 1024, {});
  EXPECT_EQ(p.num_layers, (std::vector<int>{8, 4}));
  EXPECT_EQ(p.first_layer, (std::vector<int>{0, 8}));
  // No other split has a cheaper most expensive stage.
  const double block = block_flops_per_token(model_preset("gpt2"), 1024);
  const double head = head_flops_per_token(model_preset("gpt2"));
  const double best = std::max(p.cost[0], p.cost[1]);
  for (int k = 1; k < 12; ++k) EXPECT_GE(std::max(k * block, (12 - k) * block + head), best);
}

TEST(StagePartition, EveryStageHasABlockAndAllBlocksAreUsed) {
  for (int pp : {1, 2, 3, 4}) {
    const auto p = partition_stages(model_preset("gpt-tiny"), pp, 1, 128, {});
    EXPECT_EQ(std::accumulate(p.num_layers.begin(), p.num_layers.end(), 0), 4);
    for (int n : p.num_layers) EXPECT_GE(n, 1);
  }
}

TEST(StagePartition, InterleavingSplitsEvenly) {
  const auto p = partition_stages(model_preset("gpt2"), 2, 3, 1024, {});
  EXPECT_EQ(p.num_layers, std::vector<int>(6, 2));
  EXPECT_EQ(p.first_layer[5], 10);
  EXPECT_THROW(partition_stages(model_preset("gpt2"), 4, 2, 1024, {}), Error);  // 12 % 8
}

// Dense and MoE blocks (docs/moe.md, "Dense blocks") weigh their own FLOPs: four heavy dense
// blocks, then four light MoE blocks (top 1 of experts of 8).
TEST(StagePartition, DenseAndMoeBlocksWeighTheirOwnFlops) {
  ModelConfig m = model_preset("llama-tiny");
  m.n_layer = 8;
  m.vocab_size = 512;  // a head of about a third of a block
  m.moe.experts = 8;
  m.moe.top_k = 1;
  m.moe.expert_hidden = 8;
  m.moe.first_dense = 4;
  std::vector<double> prefix = {0.0};
  for (int i = 0; i < 8; ++i) prefix.push_back(prefix.back() + block_flops_per_token(m, 128, i));
  EXPECT_GT(prefix[1], 2 * (prefix[8] - prefix[7]));  // a dense block outweighs a MoE block
  const auto p = partition_stages(m, 2, 1, 128, {});
  const int k = p.num_layers[0];
  EXPECT_DOUBLE_EQ(p.cost[0], prefix[k]);
  const double head = head_flops_per_token(m);
  EXPECT_DOUBLE_EQ(p.cost[1], prefix[8] - prefix[k] + head);
  // No other split has a cheaper most expensive stage; blocks of one kind would split evenly.
  const double best = std::max(p.cost[0], p.cost[1]);
  for (int j = 1; j < 8; ++j) EXPECT_GE(std::max(prefix[j], prefix[8] - prefix[j] + head), best);
  EXPECT_EQ(p.num_layers, (std::vector<int>{3, 5}));
  ModelConfig uniform = m;
  uniform.moe.first_dense = 0;
  EXPECT_EQ(partition_stages(uniform, 2, 1, 128, {}).num_layers, (std::vector<int>{4, 4}));
}

TEST(StagePartition, ExplicitOverrideAndErrors) {
  EXPECT_EQ(partition_stages(model_preset("gpt2"), 3, 1, 1024, {2, 5, 5}).num_layers,
            (std::vector<int>{2, 5, 5}));
  EXPECT_THROW(partition_stages(model_preset("gpt2"), 3, 1, 1024, {2, 5}), Error);
  EXPECT_THROW(partition_stages(model_preset("gpt2"), 2, 1, 1024, {12, 0}), Error);
  EXPECT_THROW(partition_stages(model_preset("gpt-tiny"), 5, 1, 128, {}), Error);  // 4 blocks
}

}  // namespace
}  // namespace kintsugi
