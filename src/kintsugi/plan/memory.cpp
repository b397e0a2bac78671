#include "kintsugi/plan/memory.hpp"

#include "kintsugi/model/block_inventory.hpp"
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
  const double rows = static_cast<double>(s.micro_batch) * static_cast<double>(s.seq);
  const double t = static_cast<double>(s.tp);
  const bool sp = s.sequence_parallel && s.tp > 1;
  const double local = sp ? rows / t : rows;  // token rows outside tensor-parallel regions
  double elements = local * static_cast<double>(m.d_model);  // the block's output
  double statistics = 0;
  // What the block saves (model/block_inventory.hpp) and keeps under this recomputation.
  for (const SavedTensor& saved : block_inventory(m).saved)
    if (saved.kept(s.recompute))
      (saved.statistic ? statistics : elements) += saved.elements(rows, local, t);
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
