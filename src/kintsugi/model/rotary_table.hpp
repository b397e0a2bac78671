#pragma once
// RoPE's angles for a model (backend/rotary.hpp), with its RoPE scaling applied
// (ModelConfig::rope_scaling; docs/config.md "RoPE scaling" gives the formulas).
#include "kintsugi/backend/rotary.hpp"
#include "kintsugi/model/config.hpp"

namespace kintsugi {

RotaryTable rotary_table(const ModelConfig& config);

}  // namespace kintsugi
