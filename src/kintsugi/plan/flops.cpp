#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

namespace {
// Parameters of one block's matrices: q and output d x d, k and v d x (kv heads x head size),
// the MLP's two (GELU) or three (SwiGLU) d x d_ff matrices.
double block_matmul_parameters(const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
  const double kv = static_cast<double>(c.kv_heads() * c.head_dim());
  return 2 * d * d + 2 * d * kv + (c.gated_mlp() ? 3 : 2) * d * f;
}
}  // namespace

std::int64_t parameter_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model, kv = c.kv_heads() * c.head_dim();
  const std::int64_t norm = c.rms_norm() ? d : 2 * d;  // RMSNorm: weight; LayerNorm: + bias
  std::int64_t per_layer = static_cast<std::int64_t>(block_matmul_parameters(c)) + 2 * norm;
  if (c.has_biases()) per_layer += (d + 2 * kv) + d + c.d_ff + d;  // qkv, out, fc, fc2
  std::int64_t total = c.vocab_size * d + c.n_layer * per_layer + norm;  // + final norm
  if (c.learned_positions()) total += c.seq_len * d;
  if (c.embedding_norm()) total += norm;
  if (!c.tied_embeddings()) total += c.vocab_size * d;  // the LM head
  return total;
}

std::int64_t matmul_parameter_count(const ModelConfig& c) {
  return c.n_layer * static_cast<std::int64_t>(block_matmul_parameters(c)) + c.vocab_size * c.d_model;
}

double hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective,
                                bool full) {
  const double d = static_cast<double>(c.d_model), L = static_cast<double>(c.n_layer);
  const double attention_forward = 4.0 * L * static_cast<double>(seq) * d;
  const double blocks_forward = 2.0 * L * block_matmul_parameters(c) + attention_forward;
  return model_flops_per_token(c, seq) + (full ? blocks_forward : selective ? attention_forward : 0.0);
}

double model_flops_per_token(const ModelConfig& c, std::int64_t seq) {
  return 6.0 * static_cast<double>(matmul_parameter_count(c)) +
         12.0 * static_cast<double>(c.n_layer) * static_cast<double>(seq) *
             static_cast<double>(c.d_model);
}

double attention_core_flops(std::int64_t sequences, std::int64_t seq, std::int64_t heads,
                            std::int64_t head_dim) {
  return 12.0 * static_cast<double>(sequences) * static_cast<double>(heads) *
         static_cast<double>(seq) * static_cast<double>(seq) * static_cast<double>(head_dim);
}

}  // namespace kintsugi
