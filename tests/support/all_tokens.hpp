#pragma once
// Every token of a token source (a token file, a Megatron dataset), in order.
#include <cstdint>
#include <vector>

#include "kintsugi/data/token_source.hpp"

namespace kintsugi::testing {

inline std::vector<std::int32_t> all_tokens(const data::TokenSource& source) {
  std::vector<std::int32_t> out(source.size());
  source.read(0, source.size(), out.data());
  return out;
}

}  // namespace kintsugi::testing
