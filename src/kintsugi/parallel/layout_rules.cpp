#include "kintsugi/parallel/layout_rules.hpp"

#include <fmt/format.h>

#include <limits>

#include "kintsugi/core/error.hpp"
#include "kintsugi/parallel/stage_partition.hpp"

namespace kintsugi {

namespace {

std::string shape_problem(const ModelConfig& m, const LayoutSpec& s) {
  const ParallelLayout& l = s.parallel;
  if (s.micro_batch < 1)
    return fmt::format("train.micro_batch = {} must be at least 1", s.micro_batch);
  // A step's program lists every micro-batch's instructions, and the rank tracks the activation
  // of each (parallel/pipeline_schedule.hpp, pipeline_executor.hpp): some 100 bytes per
  // micro-batch, built before the first step. 2^20 micro-batches per data-parallel rank (far
  // beyond any accumulation in use) keep that near 100 MB instead of letting a global batch of
  // billions exhaust the machine; the schedule counts them in an int besides.
  constexpr std::int64_t kMaxMicroBatches = std::int64_t{1} << 20;
  std::int64_t sequences_per_round = 0;  // micro_batch x dp, checked: both may be huge
  if (__builtin_mul_overflow(s.micro_batch, l.dp, &sequences_per_round) ||
      s.global_batch % sequences_per_round != 0)
    return fmt::format("train.global_batch = {} is not a multiple of train.micro_batch x dp = {} "
                       "x {}: change train.global_batch, train.micro_batch or --dp",
                       s.global_batch, s.micro_batch, l.dp);
  if (s.global_batch / sequences_per_round > kMaxMicroBatches)
    return fmt::format("train.global_batch = {} is too large: it makes {} micro-batches per "
                       "data-parallel rank per step (global_batch / (micro_batch {} x dp {})), "
                       "and a step takes at most {}; lower train.global_batch or raise "
                       "train.micro_batch",
                       s.global_batch, s.global_batch / sequences_per_round, s.micro_batch, l.dp,
                       kMaxMicroBatches);
  // Mixture of experts under tensor parallelism: experts replicated over the tp ranks, each
  // routing and running its own sequence-parallel rows (docs/moe.md, "Tensor parallelism").
  // Without sp every tp rank would run every row's experts again, so sp is required (as
  // Megatron-Core requires it); the 3D grid splits the rows otherwise and is not built.
  if (m.is_moe() && l.has_grid())
    return fmt::format("model.moe_experts = {}: mixture-of-experts layers do not run on the 3D "
                       "tensor grid: use --tp with --sequence-parallel (docs/moe.md)",
                       m.moe.experts);
  if (m.is_moe() && l.tp > 1 && !l.sequence_parallel)
    return fmt::format("model.moe_experts = {}: mixture-of-experts layers under tensor "
                       "parallelism (tp = {}) need sequence parallelism: add --sequence-parallel (each tp rank "
                       "routes its own rows through experts replicated over tp; docs/moe.md)",
                       m.moe.experts, l.tp);
  // Under context parallelism each cp rank routes the whole micro-batch too, but its rows come
  // in the cp ranks' order, not the sequences': a capacity, which keeps the lower token rows,
  // would drop other tokens than the serial run.
  if (m.is_moe() && l.cp > 1 && m.moe.capacity_factor > 0)
    return fmt::format("model.moe_capacity_factor = {} with --cp {}: the capacity keeps a "
                       "micro-batch's lower token rows first, which context parallelism "
                       "reorders; set model.moe_capacity_factor = 0 (dropless) or --cp 1 "
                       "(docs/moe.md)",
                       m.moe.capacity_factor, l.cp);
  // Expert parallelism (docs/moe.md): whole experts per rank.
  if (l.ep > 1 && !m.is_moe())
    return fmt::format("--ep {} splits a mixture of experts' experts, but the model has none "
                       "(model.moe_experts = 0): drop --ep",
                       l.ep);
  if (l.ep > 1 && m.moe.experts % l.ep != 0)
    return fmt::format("--ep {}: model.moe_experts = {} must be divisible by it (each "
                       "expert-parallel rank holds whole experts); change --ep",
                       l.ep, m.moe.experts);
  // (A tensor grid splits heads and widths over its own dimensions: grid_problem.)
  const bool grid = l.has_grid();
  if (!grid && m.n_head % l.tp != 0)
    return fmt::format("model.n_head = {} is not divisible by tp = {}: each tensor-parallel rank "
                       "needs whole heads; change --tp",
                       m.n_head, l.tp);
  // Grouped-query attention: each rank takes whole groups (its kv heads with their query heads);
  // replicating kv heads across ranks is not supported.
  if (!grid && m.kv_heads() % l.tp != 0)
    return fmt::format("model.n_kv_head = {} is not divisible by tp = {}: each tensor-parallel "
                       "rank needs whole key/value heads with their groups of query heads; use a "
                       "tp that divides {}",
                       m.kv_heads(), l.tp, m.kv_heads());
  if (!grid && m.d_ff % l.tp != 0)
    return fmt::format("model.d_ff = {} is not divisible by tp = {}: change --tp", m.d_ff, l.tp);
  if (l.sequence_parallel && l.tp > 1 && (s.micro_batch * m.seq_len) % l.tp != 0)
    return fmt::format("sequence parallelism splits micro_batch x seq_len = {} token rows across "
                       "tp = {} ranks: make it divisible",
                       s.micro_batch * m.seq_len, l.tp);
  return "";
}

// 3D tensor parallelism (docs/parallelism.md): what the grid must divide (its own shape is the
// record's: ParallelLayout::problem).
std::string grid_problem(const ModelConfig& m, const LayoutSpec& s) {
  const ParallelLayout& l = s.parallel;
  if (!l.has_grid()) return "";
  const std::int64_t gx = l.width_ranks(), gy = l.head_ranks(), gz = l.row_ranks();
  const std::string grid = fmt::format("--tensor-grid {},{},{}", gx, gy, gz);
  // q_norm and k_norm's gradients would be partial over y and z: not summed on the grid.
  if (m.qk_norm()) return fmt::format("{}: model.family = qwen3 (q_norm, k_norm) runs on 1D tensor parallelism only", grid);
  // Heads (whole groups of query heads around their kv head) and MLP columns split over y; the
  // model width over x (entry layers' inputs, exit layers' outputs); each weight block's rows
  // over z (qkv and fc: rows per y; proj and fc2: rows per x); sequences over z.
  const std::int64_t qkv = (m.n_head + 2 * m.kv_heads()) * m.head_dim();
  if (m.n_head % gy != 0 || m.kv_heads() % gy != 0)
    return fmt::format("{}: model.n_head = {} (and its {} key/value heads) must be divisible by "
                       "the grid's y = {}: each y rank holds whole heads",
                       grid, m.n_head, m.kv_heads(), gy);
  if (m.d_ff % gy != 0 || m.d_model % gx != 0)
    return fmt::format("{}: model.d_ff = {} must be divisible by y = {} and model.d_model = {} "
                       "by x = {}",
                       grid, m.d_ff, gy, m.d_model, gx);
  if (qkv / gy % gz != 0 || m.d_ff / gy % gz != 0 || m.d_model / gx % gz != 0)
    return fmt::format("{}: each weight block's rows are sharded over z = {}: it must divide "
                       "qkv width / y = {}, d_ff / y = {} and d_model / x = {}",
                       grid, gz, qkv / gy, m.d_ff / gy, m.d_model / gx);
  if (s.micro_batch % gz != 0)
    return fmt::format("{}: the grid's z = {} ranks each take a share of every micro-batch's "
                       "sequences: train.micro_batch = {} must be a multiple of {}",
                       grid, gz, s.micro_batch, gz);
  return "";
}

// Context parallelism (docs/parallelism.md): each rank holds seq_len / cp rows of every
// sequence (the ring: two chunks of seq_len / (2 cp)), and the all-to-all exchange gives each rank whole heads (with grouped-query
// attention, whole kv heads with their query heads) of its tensor-parallel rank's.
std::string context_problem(const ModelConfig& m, const LayoutSpec& s) {
  const ParallelLayout& l = s.parallel;
  if (l.cp == 1) return "";
  if (m.seq_len % l.cp != 0)
    return fmt::format("--cp {} splits every sequence over {} ranks: model.seq_len = {} must be "
                       "divisible by it",
                       l.cp, l.cp, m.seq_len);
  if (l.cp_comm == CpComm::ring && m.seq_len % (2 * l.cp) != 0)
    return fmt::format("--cp {} --cp-comm ring splits every sequence into 2 x cp = {} chunks "
                       "(rank i holds chunks i and {}-i, balancing the causal work): "
                       "model.seq_len = {} must be divisible by {}",
                       l.cp, 2 * l.cp, 2 * l.cp - 1, m.seq_len, 2 * l.cp);
  const std::int64_t split = l.tp * l.cp;
  if (l.cp_comm == CpComm::all_to_all && (m.n_head % split != 0 || m.kv_heads() % split != 0))
    return fmt::format("--cp {} --cp-comm all_to_all gives each rank whole heads: model.n_head "
                       "= {} and its {} key/value heads must be divisible by tp x cp = {}; "
                       "change --cp or --tp",
                       l.cp, m.n_head, m.kv_heads(), split);
  if (l.sequence_parallel && l.tp > 1 && (s.micro_batch * m.seq_len / l.cp) % l.tp != 0)
    return fmt::format("sequence parallelism splits a context-parallel rank's micro_batch x "
                       "seq_len / cp = {} token rows across tp = {} ranks: make it divisible",
                       s.micro_batch * m.seq_len / l.cp, l.tp);
  return "";
}

}  // namespace

std::string layout_problem(const ModelConfig& m, const LayoutSpec& spec) {
  const ParallelLayout& l = spec.parallel;
  if (auto p = l.problem(); !p.empty()) return p;
  if (auto p = grid_problem(m, spec); !p.empty()) return p;
  if (auto p = context_problem(m, spec); !p.empty()) return p;
  if (auto p = shape_problem(m, spec); !p.empty()) return p;
  try {
    const PipelineShape shape{static_cast<int>(l.pp), static_cast<int>(l.virtual_stages),
                              static_cast<int>(spec.global_batch / (spec.micro_batch * l.dp))};
    validate(l.schedule, shape);
  } catch (const Error& e) {
    return e.what();
  }
  return partition_problem(m, static_cast<int>(l.pp), static_cast<int>(l.virtual_stages),
                           l.layers_per_stage);
}

}  // namespace kintsugi
