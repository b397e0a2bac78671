#include "kintsugi/parallel/layout_rules.hpp"

#include <fmt/format.h>

#include <limits>

#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/parallel/stage_partition.hpp"

namespace kintsugi {

ZeroStage zero_stage(std::int64_t number, std::string_view what) {
  if (number < 0 || number > 3) fail("{} = {} must be 0, 1, 2 or 3", what, number);
  return static_cast<ZeroStage>(number);
}

namespace {

std::string shape_problem(const ModelConfig& m, const LayoutSpec& l) {
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.virtual_stages < 1 || l.micro_batch < 1)
    return fmt::format("tp {}, pp {}, dp {}, virtual stages {} and micro-batch {} must all be at "
                       "least 1",
                       l.tp, l.pp, l.dp, l.virtual_stages, l.micro_batch);
  // A step's program lists every micro-batch's instructions, and the rank tracks the activation
  // of each (parallel/pipeline_schedule.hpp, pipeline_executor.hpp): some 100 bytes per
  // micro-batch, built before the first step. 2^20 micro-batches per data-parallel rank (far
  // beyond any accumulation in use) keep that near 100 MB instead of letting a global batch of
  // billions exhaust the machine; the schedule counts them in an int besides.
  constexpr std::int64_t kMaxMicroBatches = std::int64_t{1} << 20;
  std::int64_t sequences_per_round = 0;  // micro_batch x dp, checked: both may be huge
  if (__builtin_mul_overflow(l.micro_batch, l.dp, &sequences_per_round) ||
      l.global_batch % sequences_per_round != 0)
    return fmt::format("train.global_batch = {} is not a multiple of train.micro_batch x dp = {} "
                       "x {}: change train.global_batch, train.micro_batch or --dp",
                       l.global_batch, l.micro_batch, l.dp);
  if (l.global_batch / sequences_per_round > kMaxMicroBatches)
    return fmt::format("train.global_batch = {} is too large: it makes {} micro-batches per "
                       "data-parallel rank per step (global_batch / (micro_batch {} x dp {})), "
                       "and a step takes at most {}; lower train.global_batch or raise "
                       "train.micro_batch",
                       l.global_batch, l.global_batch / sequences_per_round, l.micro_batch, l.dp,
                       kMaxMicroBatches);
  // (A tensor grid splits heads and widths over its own dimensions: grid_problem.)
  const bool grid = !l.tensor_grid.empty();
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
  if (l.sequence_parallel && l.tp > 1 && (l.micro_batch * m.seq_len) % l.tp != 0)
    return fmt::format("sequence parallelism splits micro_batch x seq_len = {} token rows across "
                       "tp = {} ranks: make it divisible",
                       l.micro_batch * m.seq_len, l.tp);
  return "";
}

std::string sharding_problem(const LayoutSpec& l) {
  if (l.zero >= ZeroStage::gradients && l.pp > 1)
    return fmt::format("--zero {} with --pp {}: sharded gradients are reduce-scattered every "
                       "micro-batch as each layer finishes, which pipelining interleaves across "
                       "micro-batches; use --zero 1 with pipeline parallelism (as Megatron-LM's "
                       "distributed optimizer does)",
                       stage_number(l.zero), l.pp);
  if (l.hsdp > 0 && l.zero == ZeroStage::none)
    return fmt::format("--hsdp {} shards state within groups, which needs --zero 1, 2 or 3",
                       l.hsdp);
  if (l.hsdp > 0 && (l.hsdp < 2 || l.dp % l.hsdp != 0))
    return fmt::format("--hsdp {} must be at least 2 and divide the data-parallel ranks ({})",
                       l.hsdp, l.dp);
  if (l.hsdp < 0) return fmt::format("--hsdp {} must not be negative", l.hsdp);
  return "";
}

// 3D tensor parallelism (docs/parallelism.md): what the grid must divide, and what it does not
// support yet.
std::string grid_problem(const ModelConfig& m, const LayoutSpec& l) {
  const auto& g = l.tensor_grid;
  if (g.empty()) return "";
  const std::string grid = fmt::format("--tensor-grid {},{},{}", g[0], g[1], g[2]);
  const std::int64_t gx = g[0], gy = g[1], gz = g[2];
  if (gx * gy * gz != l.tp)
    return fmt::format("{} has {} ranks but tp = {}", grid, gx * gy * gz, l.tp);
  if (l.sequence_parallel)
    return fmt::format("{} with --sequence-parallel: 3D tensor parallelism already splits the "
                       "token rows over z, and sequence parallelism is defined for 1D tensor "
                       "parallelism only; drop one of them",
                       grid);
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
  if (l.micro_batch % gz != 0)
    return fmt::format("{}: the grid's z = {} ranks each take a share of every micro-batch's "
                       "sequences: train.micro_batch = {} must be a multiple of {}",
                       grid, gz, l.micro_batch, gz);
  return "";
}

}  // namespace

std::string layout_problem(const ModelConfig& m, const LayoutSpec& l) {
  if (auto p = grid_problem(m, l); !p.empty()) return p;
  if (auto p = shape_problem(m, l); !p.empty()) return p;
  if (auto p = sharding_problem(l); !p.empty()) return p;
  try {
    LayoutMap(static_cast<int>(l.tp * l.dp * l.pp),
              {.tp = static_cast<int>(l.tp), .dp = static_cast<int>(l.dp),
               .pp = static_cast<int>(l.pp), .order = l.order});  // checks the order string
    const PipelineShape shape{static_cast<int>(l.pp), static_cast<int>(l.virtual_stages),
                              static_cast<int>(l.global_batch / (l.micro_batch * l.dp))};
    validate(l.schedule, shape);
  } catch (const Error& e) {
    return e.what();
  }
  return partition_problem(m, static_cast<int>(l.pp), static_cast<int>(l.virtual_stages),
                           l.layers_per_stage);
}

}  // namespace kintsugi
