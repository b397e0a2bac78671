#pragma once
// Which transformer blocks each pipeline chunk holds. The first chunk also holds the
// embeddings and the last the final norm, LM head and loss, whose cost is large for small
// models (GPT-2 124M's head is 31% of its FLOPs), so an even split of the blocks would leave
// the last stage the slowest. Without interleaving, the blocks are split to minimize the most
// expensive stage (model FLOPs per token, plan/flops.hpp), each stage holding at least one
// block (with dense and MoE blocks, each weighed by its own FLOPs); an explicit list
// overrides it. With v > 1 chunks per rank (interleaving) the blocks
// are split evenly, as Megatron-LM does.
#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/model/config.hpp"

namespace kintsugi {

struct StagePartition {
  std::vector<int> first_layer;  // per global chunk
  std::vector<int> num_layers;
  std::vector<double> cost;      // model FLOPs per token of each chunk
};

// Empty when the model's blocks can be cut into stages x virtual_stages chunks (with
// layers_per_stage, if given); otherwise what to change. Cheap: no partition is computed.
std::string partition_problem(const ModelConfig& model, int stages, int virtual_stages,
                              const std::vector<std::int64_t>& layers_per_stage);
// Throws kintsugi::Error naming the value to change (partition_problem).
StagePartition partition_stages(const ModelConfig& model, int stages, int virtual_stages,
                                std::int64_t seq, const std::vector<std::int64_t>& layers_per_stage);

// Model FLOPs per token of one block, and of the head (final norm, LM head, loss).
double block_flops_per_token(const ModelConfig& model, std::int64_t seq);
// Block `index`'s own, from its inventory (model/block_inventory.hpp: a MoE block's active
// matrices or a dense block's): what weighs the blocks of a model with dense and MoE blocks
// (docs/moe.md, "Dense blocks"); a model of one kind keeps the one-block weighting above.
double block_flops_per_token(const ModelConfig& model, std::int64_t seq, int index);
double head_flops_per_token(const ModelConfig& model);

}  // namespace kintsugi
