#include "kintsugi/plan/memory.hpp"

#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

StateBytes model_state_bytes(double p, int stage, std::int64_t shards, std::int64_t pb,
                             std::int64_t gb, bool mixed, int moments) {
  const double n = static_cast<double>(shards);
  const double optimizer = p * (4.0 * moments + (mixed ? 4.0 : 0.0));
  return {.parameters = p * pb / (stage >= 3 ? n : 1.0),
          .gradients = p * gb / (stage >= 2 ? n : 1.0),
          .optimizer_state = optimizer / (stage >= 1 ? n : 1.0)};
}

double block_activation_bytes(const ModelConfig& m, const ActivationShape& s) {
  const double b = static_cast<double>(s.micro_batch), q = static_cast<double>(s.seq);
  const double h = static_cast<double>(m.d_model), f = static_cast<double>(m.d_ff);
  const double a = static_cast<double>(m.n_head), t = static_cast<double>(s.tp);
  // Queries plus a key and a value per kv head: 3h without grouped-query attention.
  const double qkv = static_cast<double>(qkv_width(m));
  const double norm_stats = m.rms_norm() ? 1 : 2;  // RMSNorm keeps no mean
  const double mlp = m.gated_mlp() ? 3 : 2;        // SwiGLU: gate, up, product; GELU: in, out
  const bool sp = s.sequence_parallel && s.tp > 1;
  const double local = sp ? b * q / t : b * q;  // token rows outside tensor-parallel regions
  double elements = local * h;  // the block's output (residual stream)
  double statistics = 0;
  if (s.recompute != Recompute::full) {
    elements += 3 * local * h;                             // ln1, mid, ln2
    statistics += 2 * norm_stats * local;                  // their statistics
    elements += b * q * qkv / t + mlp * b * q * f / t;     // qkv, MLP activations
    if (s.recompute == Recompute::none) {
      elements += b * q * h / t;    // attention output
      statistics += b * q * a / t;  // log-sum-exp
    }
  }
  return elements * static_cast<double>(s.element_bytes) +
         statistics * static_cast<double>(s.statistic_bytes);
}

double chunk_activation_bytes(const ModelConfig& m, const ActivationShape& s, std::int64_t blocks,
                              bool head, bool embedding) {
  const double local = static_cast<double>(s.micro_batch * s.seq) /
                       (s.sequence_parallel && s.tp > 1 ? static_cast<double>(s.tp) : 1.0);
  const double h = static_cast<double>(m.d_model), e = static_cast<double>(s.element_bytes);
  const double st = static_cast<double>(s.statistic_bytes);
  double bytes = static_cast<double>(blocks) * block_activation_bytes(m, s) + local * h * e;
  if (head) bytes += 2 * local * h * e + (m.rms_norm() ? 1 : 2) * local * st;
  if (embedding && m.embedding_norm()) bytes += local * h * e + 2 * local * st;
  return bytes;
}

}  // namespace kintsugi
