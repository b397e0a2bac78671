#pragma once
// An attention shape as the parameter of a kernel test, and its part of the test's name
// (B2_T5_H2_KV2_D4).
#include <cstdint>
#include <string>

namespace kintsugi::testing {

struct AttentionCase {
  std::int64_t batch, seq, heads, kv_heads, head_dim;
};

inline std::string attention_case_name(const AttentionCase& c) {
  return "B" + std::to_string(c.batch) + "_T" + std::to_string(c.seq) + "_H" +
         std::to_string(c.heads) + "_KV" + std::to_string(c.kv_heads) + "_D" +
         std::to_string(c.head_dim);
}

}  // namespace kintsugi::testing
