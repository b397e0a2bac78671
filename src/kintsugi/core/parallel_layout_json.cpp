#include "kintsugi/core/parallel_layout_json.hpp"

#include <nlohmann/json.hpp>

namespace kintsugi {

nlohmann::json layout_json(const ParallelLayout& p) {
  return {{"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"order", p.order},
          {"schedule", std::string(name_of(p.schedule))},
          {"virtual_stages", p.virtual_stages},
          {"layers_per_stage", p.layers_per_stage},
          {"zero", stage_number(p.zero)},
          {"hsdp", p.hsdp},
          {"sequence_parallel", p.sequence_parallel},
          {"tensor_grid", p.tensor_grid},
          {"tensor_grid_overlap", p.tensor_grid_overlap}};
}

}  // namespace kintsugi
