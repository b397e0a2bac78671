#pragma once
// One transformer block's inventory, declared once: its linear layers, its norms and the tensors
// its forward saves for backward. The block registers its parameters and carves its saved
// tensors from it (model/transformer_block.cpp); the planner sums it for a layout (plan/flops.cpp,
// plan/memory.cpp, plan/grid_cost.cpp, and its halves' tensor-parallel regions in
// plan/comm_volume.cpp). A new bias or saved tensor is one edit here.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/model/block_half.hpp"
#include "kintsugi/model/block_workspace.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

// Activation recomputation (Korthikanti et al.): what a block keeps from forward to backward.
//   none       everything backward needs
//   selective  all but the attention core's output and log-sum-exp, recomputed from qkv
//   full       nothing but the block's input (kept by the chunk); backward reruns the forward
enum class Recompute : std::uint8_t { none, selective, full };
template <>
struct EnumNames<Recompute> {
  static constexpr std::array values = {std::pair{Recompute::none, "none"},
                                        std::pair{Recompute::selective, "selective"},
                                        std::pair{Recompute::full, "full"}};
};

// A tensor forward saves for backward, per micro-batch.
struct SavedTensor {
  Tensor BlockActivations::*field = nullptr;
  // Its shape, with `rows` the residual stream's token rows (this rank's slice under sequence
  // parallelism) when local_rows, else every token row of the micro-batch:
  //   matrix   [rows, width / split]
  //   per_row  [rows]                            (a norm's statistics)
  //   per_head [batch, width / split, seq]       (attention's log-sum-exp; width: the heads)
  // where split is the ranks that split heads and MLP columns if head_split, else 1.
  enum class Form { matrix, per_row, per_head };
  Form form = Form::matrix;
  bool local_rows = true;
  std::int64_t width = 0;
  bool head_split = false;
  bool statistic = false;       // the statistics type (f32), else the compute type
  bool attention_core = false;  // the attention core's output: selective recomputation drops it
  bool index = false;           // i32 (a mixture of experts' routing), else a float type
  std::int64_t row_factor = 1;  // rows per token row (a mixture of experts' top_k routed rows)

  // Kept per micro-batch under `recompute` (else recomputed into the shared workspace).
  bool kept(Recompute recompute) const;
  // Its shape for a micro-batch of [batch, seq] token rows, `local` of them the residual
  // stream's, split over `split` ranks.
  Shape shape(std::int64_t batch, std::int64_t seq, std::int64_t local, std::int64_t split) const;
  // Its elements for a micro-batch of `rows` token rows of which `local` are the residual
  // stream's, split over `split` ranks.
  double elements(double rows, double local, double split) const;
};

// A mixture-of-experts MLP half (model/moe_layer.hpp): its router, experts and shared expert.
struct MoeSpec {
  std::string prefix;  // "blocks.N.moe"
  std::int64_t d = 0, experts = 0, top_k = 0, hidden = 0, shared_hidden = 0;
  double init_std = 0, residual_std = 0;
  bool renormalize = true;
  double capacity_factor = 0;  // model.moe_capacity_factor (0: dropless)
  // DeepSeek-style routing (docs/moe.md): the score, the gates' scale, the groups, the
  // balancing bias's rate (0: no bias).
  bool sigmoid = false;
  double routed_scaling = 1.0;
  std::int64_t groups = 1, topk_groups = 1;
  double bias_update_rate = 0;
  // Expert parallelism: the ranks splitting the experts (1: none), and the most routed rows
  // per token row that a rank's experts can receive (docs/moe.md: every token of the ep
  // ranks' micro-batches may choose min(top_k, experts / ep) of them); top_k without it.
  std::int64_t expert_ranks = 1;
  std::int64_t local_experts() const { return experts / expert_ranks; }
  std::int64_t received_row_factor() const {
    return expert_ranks == 1 ? top_k : expert_ranks * std::min(top_k, local_experts());
  }
  // Matrix elements: every expert's (parameters) and those a token uses (FLOPs): the router,
  // top_k experts' three matrices, the shared expert's three and its gate.
  double matrix_parameters() const;
  double active_matrix_parameters() const;
};

struct BlockInventory {
  std::array<HalfSpec, 2> halves;  // attention (qkv, proj), MLP (fc or gate, [up], fc2 or down)
  std::int64_t norm_width = 0;     // ln1 and ln2: a weight each, and with LayerNorm a bias
  bool norm_bias = true;
  std::int64_t qk_norm_width = 0;  // Qwen3's q_norm and k_norm: a weight of head_dim each (0: none)
  std::vector<SavedTensor> saved;  // in the order they are carved
  // A mixture of experts instead of the dense MLP (halves[1] then has no layers).
  std::optional<MoeSpec> moe;

  // The layers' matrices (every parameter of them), and those one token multiplies (the
  // block's share of N_matmul, plan/flops.hpp): with a mixture of experts, its top_k experts.
  double matrix_parameters() const;
  double active_matrix_parameters() const;
  // The biases of the entry layers (column-parallel: split like the matrices) and of the exit
  // layers (added once after the reduction: replicated).
  double entry_bias_parameters() const;
  double exit_bias_parameters() const;
  // Both norms, and q_norm and k_norm.
  double norm_parameters() const;
};

// Block `index`'s inventory (the index names the parameters and, with a mixture of experts,
// says whether the block is a MoE block: ModelConfig::is_moe_block), its experts split over
// `expert_ranks` ranks (expert parallelism).
// `context_ranks`: context parallelism's ranks, each holding a share of every sequence (a MoE
// block routes the whole micro-batch's rows: model/moe_layer.hpp).
BlockInventory block_inventory(const ModelConfig& config, int index = 0,
                               std::int64_t expert_ranks = 1, std::int64_t context_ranks = 1);

// The blocks [first, first + count) of a model (all by default) by kind: [0] dense, [1] MoE
// (docs/moe.md, "Dense blocks"), each as the model's first block of that kind (-1: none) and
// how many of the range are of it. Blocks of one kind have the same inventory but for names.
struct BlockKind {
  int index = -1;
  std::int64_t count = 0;
};
std::array<BlockKind, 2> block_kinds(const ModelConfig& config, std::int64_t first = 0,
                                     std::int64_t count = -1);
// f(index) summed over blocks [first, first + count), computed once per kind and multiplied by
// its count: for blocks of one kind the same bits as count x f(index).
template <class F>
double sum_over_blocks(const ModelConfig& config, F&& f, std::int64_t first = 0,
                       std::int64_t count = -1) {
  double sum = 0;
  for (const BlockKind& k : block_kinds(config, first, count))
    if (k.count > 0) sum += static_cast<double>(k.count) * f(k.index);
  return sum;
}

// Every tensor some block of the model saves, each once: block 0's, then those of the other
// kind of block (a MoE block's or a dense one's: docs/moe.md, "Dense blocks") that block 0 does
// not save. The shared workspace holds these for recomputation (model/transformer_block.cpp).
std::vector<SavedTensor> saved_by_any_block(const ModelConfig& config,
                                            std::int64_t expert_ranks = 1);
// The first MoE block's inventory, or block 0's when the model has none: the MoE workspace
// every MoE block shares.
BlockInventory first_moe_block_inventory(const ModelConfig& config, std::int64_t expert_ranks = 1,
                                         std::int64_t context_ranks = 1);

}  // namespace kintsugi
