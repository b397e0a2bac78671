#pragma once
// A model's weights as bytes, every parameter in order: equal bytes, bit-identical weights.
#include <cstddef>
#include <vector>

#include "kintsugi/train/stage_model.hpp"

namespace kintsugi::testing {

inline std::vector<std::byte> weights_of(const StageModel& model) {
  std::vector<std::byte> out;
  for (const ParamStore* p : model.params())
    for (int i = 0; i < p->size(); ++i) {
      const Tensor t = p->param(i);
      const auto* b = static_cast<const std::byte*>(t.data);
      out.insert(out.end(), b, b + t.bytes());
    }
  return out;
}

}  // namespace kintsugi::testing
