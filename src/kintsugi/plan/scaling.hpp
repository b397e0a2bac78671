#pragma once
// Scaling curves (`kintsugi plan --scaling strong|weak`, docs/planner.md): the fastest layout
// the pins allow at each node count, its step, throughput per device and efficiency.
//   strong: the global batch stays as given
//   weak:   the global batch grows with the node count (batch x nodes / first nodes), so each
//           replica keeps its share (the Frontier study's weak scaling: 640 sequences per
//           175B replica)
//   efficiency = throughput per device / the first point's: (T_1 N_1) / (T_N N) for strong
//                scaling, T_1 / T_N for weak
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi {

enum class Scaling : std::uint8_t { strong, weak };
template <>
struct EnumNames<Scaling> {
  static constexpr std::array values = {std::pair{Scaling::strong, "strong"},
                                        std::pair{Scaling::weak, "weak"}};
};

struct ScalingPoint {
  std::int64_t nodes = 0, devices = 0, global_batch = 0;
  std::optional<Prediction> best;  // empty: no layout fits (or none is valid) at this count
  double tokens_per_s_per_device = 0;
  double model_tflops_per_device = 0;
  double efficiency = 0;           // against the first point that has a layout
};

// `nodes` ascending; a weak-scaling batch that is not a whole number is an Error.
std::vector<ScalingPoint> scaling_curve(const Workload& w, const ClusterSpec& cluster,
                                        const std::vector<std::int64_t>& nodes,
                                        const SearchSpace& space, Scaling kind);

}  // namespace kintsugi
