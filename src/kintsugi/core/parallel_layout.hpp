#pragma once
// The layout record: how a job splits its ranks and its model, every parallelism dimension in
// one value. The config's parallel section is one (train/run_config.hpp), and whatever else
// describes a layout holds one and adds its own fields: the rule book's LayoutSpec adds the
// batch (parallel/layout_rules.hpp), the planner's Layout the micro-batch and recomputation
// (plan/cost_model.hpp); the runtime's LayoutMap and Topology (comm/topology.hpp) and the byte
// theory (plan/comm_volume.hpp) read it as it is. A new parallelism dimension is one field here
// (with its config key, its groups, its layers and its cost terms: docs/architecture.md).
//
// It lives in core, below every layer that reads it, and knows no model: what a layout demands
// of a model (heads per rank, stage sizes) is the rule book's.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

class LayoutPins;

// Pipeline schedules (parallel/pipeline_schedule.hpp builds their programs).
enum class PipelineSchedule : std::uint8_t { gpipe, one_f_one_b, interleaved };
template <>
struct EnumNames<PipelineSchedule> {
  static constexpr std::array values = {std::pair{PipelineSchedule::gpipe, "gpipe"},
                                        std::pair{PipelineSchedule::one_f_one_b, "1f1b"},
                                        std::pair{PipelineSchedule::interleaved, "interleaved"}};
};

// ZeRO (parallel.zero): what is sharded over the data-parallel ranks (or an HSDP group). The
// stages are cumulative, so `zero >= ZeroStage::gradients` reads "gradients are sharded".
enum class ZeroStage : std::uint8_t { none = 0, optimizer = 1, gradients = 2, parameters = 3 };
constexpr int stage_number(ZeroStage z) { return static_cast<int>(z); }
// 0-3, else a kintsugi::Error naming `what`.
ZeroStage zero_stage(std::int64_t number, std::string_view what);

// How context-parallel ranks exchange what attention needs (parallel.cp_comm,
// docs/parallelism.md "Context parallelism"): all_to_all (DeepSpeed's Ulysses) trades the
// sequence split for a head split around attention; ring passes key/value chunks around the
// group.
enum class CpComm : std::uint8_t { all_to_all, ring };
template <>
struct EnumNames<CpComm> {
  static constexpr std::array values = {std::pair{CpComm::all_to_all, "all_to_all"},
                                        std::pair{CpComm::ring, "ring"}};
};

// The dimensions ranks are arranged along (comm/topology.hpp's LayoutMap).
enum class Dim : int { tp = 0, dp = 1, pp = 2, cp = 3 };
constexpr int kDims = 4;
template <>
struct EnumNames<Dim> {
  static constexpr std::array values = {std::pair{Dim::tp, "tp"}, std::pair{Dim::dp, "dp"},
                                        std::pair{Dim::pp, "pp"}, std::pair{Dim::cp, "cp"}};
};
// The dimensions an order string ("tp-dp-pp", "tp-cp-dp-pp") names, fastest-varying first;
// throws kintsugi::Error naming parallel.order unless it names tp, dp and pp once each and cp
// at most once. An order without cp places it right after tp (Megatron-LM's tp-cp-dp-pp), so
// the orders written before context parallelism mean what they did.
std::array<Dim, kDims> order_dims(const std::string& order);

struct ParallelLayout {
  std::int64_t tp = 1;  // tensor-parallel ranks
  std::int64_t pp = 1;  // pipeline stages
  std::int64_t dp = 1;  // data-parallel ranks (a config's 0: world size / (tp pp), resolved)
  std::string order = "tp-dp-pp";  // rank order, fastest-varying dimension first
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  std::int64_t virtual_stages = 1;             // model chunks per pipeline rank (interleaved)
  std::vector<std::int64_t> layers_per_stage;  // empty: balanced by cost
  ZeroStage zero = ZeroStage::none;
  std::int64_t hsdp = 0;  // ZeRO shard groups of this many data-parallel ranks (0: all)
  bool sequence_parallel = false;
  // Context parallelism: every sequence split over this many ranks, which see the same
  // sequences and hold the same weights (docs/parallelism.md "Context parallelism").
  std::int64_t cp = 1;
  CpComm cp_comm = CpComm::all_to_all;
  // 3D tensor parallelism: the tp ranks as an [x, y, z] grid, x y z = tp (empty: Megatron's
  // 1D tensor parallelism; comm/grid_groups.hpp), and whether its collectives overlap
  // computation (false: each blocks where it is issued; the same bits either way).
  std::vector<std::int64_t> tensor_grid;
  bool tensor_grid_overlap = true;
  // Expert parallelism (docs/moe.md, "Expert parallelism"): every mixture-of-experts layer's
  // experts split over this many of the data-parallel ranks (consecutive ones of the data
  // group: group "ep"), which exchange token rows by all-to-all; the dp / ep ranks holding the
  // same experts (group "edp") sum the experts' gradients and shard their ZeRO state, as
  // Megatron-Core's expert data parallelism does. Not a dimension of the rank order: it divides
  // dp, which keeps counting every rank that sees its own tokens.
  std::int64_t ep = 1;

  bool operator==(const ParallelLayout&) const = default;
  std::int64_t world() const { return tp * pp * dp * cp; }
  // The ranks that hold the same weights and see different tokens: gradients are summed, and
  // ZeRO state sharded, over them (dp x cp, as Megatron-LM's distributed optimizer does).
  std::int64_t data_ranks() const { return dp * cp; }
  bool has_grid() const { return !tensor_grid.empty(); }
  // The ranks that split the model width (a grid's x: its entry layers' inputs and exit
  // layers' outputs; 1D: 1), a block's heads and MLP columns (1D: tp; a grid: its y), a
  // micro-batch's token rows (a grid's z, each of whose ranks sees its own sequences; else 1),
  // and the vocabulary of the embedding and head (1D: tp; a grid: its x y plane). Callers that
  // size a rank's share ask these, not the grid's coordinates.
  std::int64_t width_ranks() const { return has_grid() ? tensor_grid[0] : 1; }
  std::int64_t head_ranks() const { return has_grid() ? tensor_grid[1] : tp; }
  std::int64_t row_ranks() const { return has_grid() ? tensor_grid[2] : 1; }
  std::int64_t vocab_ranks() const { return has_grid() ? tensor_grid[0] * tensor_grid[1] : tp; }
  // Ranks one ZeRO shard is split over, and the groups holding the same shard (hybrid
  // sharding: dp / hsdp replicas; else one).
  std::int64_t shards() const {
    return zero > ZeroStage::none ? (hsdp > 0 ? hsdp : data_ranks()) : 1;
  }
  std::int64_t replicas() const {
    return zero > ZeroStage::none && hsdp > 0 ? data_ranks() / hsdp : 1;
  }
  // The expert-data-parallel ranks (dp / ep), over which the experts' gradients are summed and
  // their ZeRO state sharded (1 shard without ZeRO).
  std::int64_t expert_data_ranks() const { return data_ranks() / ep; }
  std::int64_t expert_shards() const {
    return zero > ZeroStage::none ? expert_data_ranks() : 1;
  }
  // The layout on a job of `world` ranks: tp from the tensor grid (which implies it; a tp given
  // as well must agree) and dp = 0 from the world size; throws kintsugi::Error saying which
  // value to change when the ranks do not split so.
  ParallelLayout resolved(std::int64_t world) const;
  // Empty when each value is within its range, before the world size resolves dp (a dp of 0
  // passes); otherwise one sentence naming the config key to change (its flag has its name).
  // The config's validation asks this; problem() below asks it first.
  std::string value_problem() const;
  // Empty when the layout is consistent in itself (dp resolved); otherwise one sentence saying
  // what is wrong and which value to change. What a layout demands of a model and a batch is
  // parallel/layout_rules.hpp's layout_problem, which asks this first.
  std::string problem() const;
  // What the run's text and log say of the split after "N ranks = " ("tp 2 x dp 2 x pp 1 (order
  // tp-dp-pp), ZeRO-1 over 2 ranks"); `stages` is inserted after the pipeline schedule (the
  // blocks each chunk holds, which the model decides).
  std::string description(const std::string& stages) const;
  // This layout as a planner chose it, over a run's `base`: what a planner does not choose (the
  // rank order; context parallelism's exchange where there is no cp; the stage sizes while the
  // stages stay as many; a grid's overlap where the layout has no grid) stays the base's.
  ParallelLayout planned_over(const ParallelLayout& base) const;
};

// Whether two layouts split the same work over the same ranks in the same way: they may differ
// only in what places state or times collectives (ZeRO stage and sharding groups, rank order,
// stage sizes, a grid's overlap), which measured step times do not tell apart (plan/refit.hpp).
bool same_split(const ParallelLayout& a, const ParallelLayout& b);

// What a layout search tries, field by field (plan/search.hpp), pins applied; a new dimension
// joins every search here.
// The tensor splits of tp ranks: 1D, and each grid x y z = tp (its shape against a model is the
// rule book's). 1 x tp x 1 makes 1D's splits and collectives with the grid's code
// (docs/parallelism.md, "Degenerate grids"), so it is tried only when a pin lists it; `named`
// says the pins list the grid by value (a search lets it span nodes).
struct TensorSplit {
  ParallelLayout layout;
  bool named = false;
};
std::vector<TensorSplit> tensor_splits(std::int64_t tp, const LayoutPins& pins);
// The refinements of a layout whose ranks are split (tp, pp, dp, schedule set): every ZeRO stage
// (none with one data-parallel rank) with each hybrid-sharding group (a proper divisor of dp),
// sequence parallelism where 1D tensor parallelism has it, a grid's overlap where pinned
// (else on, the runtime's default), and with cp > 1 both context-parallel exchanges (those
// pinned): a config's parallel.cp_comm is only a starting point unless --cp-comm pins it.
std::vector<ParallelLayout> refinements(const ParallelLayout& split, const LayoutPins& pins);

}  // namespace kintsugi

// fmt prints a ZeRO stage as its number, as users write it (--zero 3).
template <>
struct fmt::formatter<kintsugi::ZeroStage> : fmt::formatter<int> {
  auto format(kintsugi::ZeroStage z, format_context& ctx) const {
    return fmt::formatter<int>::format(kintsugi::stage_number(z), ctx);
  }
};
