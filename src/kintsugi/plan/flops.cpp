#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

std::int64_t parameter_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  const std::int64_t per_layer = 2 * 2 * d                 // two LayerNorms
                                 + 3 * d * d + 3 * d       // qkv
                                 + d * d + d               // projection
                                 + d * c.d_ff + c.d_ff     // fc
                                 + c.d_ff * d + d;         // fc2
  return c.vocab_size * d + c.seq_len * d + c.n_layer * per_layer + 2 * d;
}

std::int64_t matmul_parameter_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  return c.n_layer * (4 * d * d + 2 * d * c.d_ff) + c.vocab_size * d;
}

double hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective,
                                bool full) {
  const double d = static_cast<double>(c.d_model), L = static_cast<double>(c.n_layer);
  const double attention_forward = 4.0 * L * static_cast<double>(seq) * d;
  const double blocks_forward = 2.0 * L * (4 * d * d + 2 * d * c.d_ff) + attention_forward;
  return model_flops_per_token(c, seq) + (full ? blocks_forward : selective ? attention_forward : 0.0);
}

double model_flops_per_token(const ModelConfig& c, std::int64_t seq) {
  return 6.0 * static_cast<double>(matmul_parameter_count(c)) +
         12.0 * static_cast<double>(c.n_layer) * static_cast<double>(seq) *
             static_cast<double>(c.d_model);
}

}  // namespace kintsugi
