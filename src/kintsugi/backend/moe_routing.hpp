#pragma once
// How a mixture of experts' router scores and selects (Backend::moe_route, docs/moe.md "The
// layer" and "DeepSeek-style routing"); plain C++ for the CPU and CUDA kernels alike.
#include <cstdint>

namespace kintsugi {

struct MoeRouting {
  std::int64_t top_k = 1;
  // The chosen experts' gates divided by their sum (model.moe_router_norm_topk).
  bool renormalize = true;
  // The scores: a softmax over the experts (false) or each expert's sigmoid (DeepSeek-V3).
  bool sigmoid = false;
  // The gates times this (model.moe_routed_scaling_factor).
  double scale = 1.0;
  // Group-limited selection: the experts in `groups` equal groups, a group's score the sum of
  // its two best selection scores (its one when a group has one expert); top_k is chosen among
  // the topk_groups best groups' experts. 1: off.
  std::int64_t groups = 1, topk_groups = 1;
};

}  // namespace kintsugi
