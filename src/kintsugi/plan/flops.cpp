#include "kintsugi/plan/flops.hpp"

#include "kintsugi/model/block_inventory.hpp"

namespace kintsugi {

namespace {
// Parameters of one block's matrices that a token multiplies (model/block_inventory.hpp): q
// and output d x d, k and v d x (kv heads x head size), the MLP's two (GELU) or three (SwiGLU)
// d x d_ff matrices; with a mixture of experts the router, top_k experts' three matrices and the
// shared expert's (active parameters: a token's FLOPs).
double block_matmul_parameters(const ModelConfig& c, int index) {
  return block_inventory(c, index).active_matrix_parameters();
}
}  // namespace

std::int64_t qkv_width(const ModelConfig& c) { return c.q_width() + 2 * c.kv_heads() * c.head_dim(); }

std::int64_t norm_parameters(const ModelConfig& c) { return c.rms_norm() ? c.d_model : 2 * c.d_model; }

BlockParameters block_parameters(const ModelConfig& c, int index) {
  const BlockInventory b = block_inventory(c, index);
  const double experts = b.moe ? b.moe->matrix_parameters() : 0.0;
  return {.split = b.matrix_parameters() - experts + b.entry_bias_parameters(),
          .replicated = b.norm_parameters() + b.exit_bias_parameters() + experts};
}

double parameter_count_double(const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model), vocab = static_cast<double>(c.vocab_size);
  const double norm = static_cast<double>(norm_parameters(c));
  // Every block's (dense and MoE blocks: docs/moe.md, "Dense blocks").
  const double blocks = sum_over_blocks(c, [&](int i) { return block_parameters(c, i).total(); });
  double total = vocab * d + blocks + norm;  // + final norm
  if (c.learned_positions()) total += static_cast<double>(c.seq_len) * d;
  if (c.embedding_norm()) total += norm;
  if (!c.tied_embeddings()) total += vocab * d;  // the LM head
  return total;
}

std::int64_t parameter_count(const ModelConfig& c) {
  return static_cast<std::int64_t>(parameter_count_double(c));
}

double active_parameter_count(const ModelConfig& c) {
  return parameter_count_double(c) - sum_over_blocks(c, [&](int i) {
           const BlockInventory b = block_inventory(c, i);
           return b.matrix_parameters() - b.active_matrix_parameters();
         });
}

std::int64_t matmul_parameter_count(const ModelConfig& c) {
  return static_cast<std::int64_t>(
             sum_over_blocks(c, [&](int i) { return block_matmul_parameters(c, i); })) +
         c.vocab_size * c.d_model;
}

double block_hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective,
                                      bool full, int index) {
  // The attention products are as wide as the queries (d_model unless head_dim is set apart).
  const double q = static_cast<double>(c.q_width()), s = attended_keys(seq, c.sliding_window);
  const double matrices = block_matmul_parameters(c, index);
  const double attention_forward = 4.0 * s * q;  // QK^T and PV, forward
  // Qwen3's q_norm and k_norm, as Backend::qk_norm_forward and qk_norm_backward count them: 4
  // FLOPs per query and key element forward, 10 backward; full recomputation reruns the forward
  // (selective reruns the attention core alone, on the normalized, rotated qkv).
  const double qk = c.qk_norm() ? static_cast<double>((c.n_head + c.kv_heads()) * c.head_dim()) : 0.0;
  const double model = 6.0 * matrices + 12.0 * s * q + 14.0 * qk;
  return model + (full ? 2.0 * matrices + attention_forward + 4.0 * qk
                       : selective ? attention_forward : 0.0);
}

double lm_head_flops_per_token(const ModelConfig& c) {
  return 6.0 * static_cast<double>(c.vocab_size) * static_cast<double>(c.d_model);
}

double hardware_flops_per_token(const ModelConfig& c, std::int64_t seq, bool selective,
                                bool full) {
  return sum_over_blocks(c, [&](int i) {
           return block_hardware_flops_per_token(c, seq, selective, full, i);
         }) + lm_head_flops_per_token(c);
}

double model_flops_per_token(const ModelConfig& c, std::int64_t seq) {
  return hardware_flops_per_token(c, seq, false, false);
}

double attention_core_flops(std::int64_t sequences, std::int64_t seq, std::int64_t heads,
                            std::int64_t head_dim, std::int64_t window) {
  return 12.0 * static_cast<double>(sequences) * static_cast<double>(heads) *
         static_cast<double>(seq) * attended_keys(seq, window) * static_cast<double>(head_dim);
}

}  // namespace kintsugi
