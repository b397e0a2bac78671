#pragma once
// The one rule book of layouts: whether a job can train a model with a given split of its ranks
// and batch. The runtime (resolve_layout) and the planner (its search and pinned layouts) both
// ask layout_problem, so a layout the planner recommends is one the runtime accepts.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kintsugi/model/config.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"

namespace kintsugi {

// ZeRO (parallel.zero): what is sharded over the data-parallel ranks (or an HSDP group). The
// stages are cumulative, so `zero >= ZeroStage::gradients` reads "gradients are sharded".
enum class ZeroStage : std::uint8_t { none = 0, optimizer = 1, gradients = 2, parameters = 3 };
constexpr int stage_number(ZeroStage z) { return static_cast<int>(z); }
// 0-3, else a kintsugi::Error naming `what`.
ZeroStage zero_stage(std::int64_t number, std::string_view what);

struct LayoutSpec {
  std::int64_t tp = 1, pp = 1, dp = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  std::int64_t virtual_stages = 1;
  ZeroStage zero = ZeroStage::none;
  std::int64_t hsdp = 0;  // ZeRO shard groups of this many data-parallel ranks (0: all)
  bool sequence_parallel = false;
  std::vector<std::int64_t> layers_per_stage;  // empty: balanced by cost
  std::string order = "tp-dp-pp";
  // 3D tensor parallelism: [x, y, z] with x y z = tp (empty: 1D; comm/tensor_grid.hpp)
  std::vector<std::int64_t> tensor_grid;
  std::int64_t global_batch = 1, micro_batch = 1;  // sequences per step and per micro-batch
};

// Empty when the layout is valid for the model; otherwise one sentence saying what is wrong and
// which value to change.
std::string layout_problem(const ModelConfig& model, const LayoutSpec& layout);

}  // namespace kintsugi

// fmt prints a ZeRO stage as its number, as users write it (--zero 3).
template <>
struct fmt::formatter<kintsugi::ZeroStage> : fmt::formatter<int> {
  auto format(kintsugi::ZeroStage z, format_context& ctx) const {
    return fmt::formatter<int>::format(kintsugi::stage_number(z), ctx);
  }
};
