#pragma once
// The angles rotary position embeddings (RoPE) turn by: pair i of a head (dimensions i and
// i + head_dim / 2) at position t turns by t * inv_freq[i], and its cosine and sine are scaled by
// `scale` (YaRN's attention factor, 1 otherwise). The model builds the table once from its
// config (model/rotary_table.hpp, where RoPE scaling lives); every backend's kernel reads it, so
// all devices rotate by the same angles.
#include <cmath>
#include <cstdint>
#include <vector>

namespace kintsugi {

struct RotaryTable {
  std::vector<double> inv_freq;  // head_dim / 2 entries
  double scale = 1.0;

  // RoPE without scaling: inv_freq[i] = theta^(-2i / head_dim).
  static RotaryTable plain(double theta, std::int64_t head_dim) {
    RotaryTable t;
    for (std::int64_t i = 0; i < head_dim / 2; ++i)
      t.inv_freq.push_back(
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
    return t;
  }
};

}  // namespace kintsugi
