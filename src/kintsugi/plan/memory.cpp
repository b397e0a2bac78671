#include "kintsugi/plan/memory.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "kintsugi/model/block_inventory.hpp"
#include "kintsugi/plan/flops.hpp"

namespace kintsugi {

namespace {

// What the activation carver reserves for a tensor of `bytes` (model/carver.hpp: 64-byte
// units), which a few rows' statistics leave partly unused.
double allocated(double bytes) { return std::ceil(bytes / 64.0) * 64.0; }

}  // namespace

StateBytes model_state_bytes(double p, int stage, std::int64_t shards, std::int64_t pb,
                             std::int64_t gb, bool mixed, int moments) {
  const double n = static_cast<double>(shards);
  const double optimizer = p * (4.0 * moments + (mixed ? 4.0 : 0.0));
  return {.parameters = p * pb / (stage >= 3 ? n : 1.0),
          .gradients = p * gb / (stage >= 2 ? n : 1.0),
          .optimizer_state = optimizer / (stage >= 1 ? n : 1.0)};
}

double block_activation_bytes(const ModelConfig& m, const ActivationShape& s, int index) {
  const double rows = static_cast<double>(s.micro_batch) * static_cast<double>(s.seq);
  const double t = static_cast<double>(s.tp);
  const bool sp = s.sequence_parallel && s.tp > 1;
  const double local = sp ? rows / t : rows;  // token rows outside tensor-parallel regions
  const double e = static_cast<double>(s.element_bytes), st = static_cast<double>(s.statistic_bytes);
  double bytes = allocated(local * static_cast<double>(m.d_model) * e);  // the block's output
  // What the block saves (model/block_inventory.hpp) and keeps under this recomputation.
  for (const SavedTensor& saved : block_inventory(m, index, s.expert_ranks, s.cp).saved)
    if (saved.kept(s.recompute))
      bytes += allocated(saved.elements(rows, local, t) *
                         (saved.index ? 4.0 : saved.statistic ? st : e));
  return bytes;
}

double chunk_activation_bytes(const ModelConfig& m, const ActivationShape& s,
                              std::span<const BlockRange> chunks, bool head, bool embedding) {
  const double local = static_cast<double>(s.micro_batch * s.seq) /
                       (s.sequence_parallel && s.tp > 1 ? static_cast<double>(s.tp) : 1.0);
  const double h = static_cast<double>(m.d_model), e = static_cast<double>(s.element_bytes);
  const double st = static_cast<double>(s.statistic_bytes);
  const double row = allocated(local * h * e), statistic = allocated(local * st);
  // Segment "block j" of the rank's chunks (model/model_chunk.cpp): what block j saves, sized
  // by the first chunk to ask, a new buffer for each later, larger request (blocks of one kind:
  // one buffer each). The blocks' outputs are the segment "residual", sized by the most blocks.
  const std::array<BlockKind, 2> kinds = block_kinds(m);
  std::array<double, 2> kind_bytes{};
  for (std::size_t k = 0; k < kinds.size(); ++k)
    if (kinds[k].index >= 0) kind_bytes[k] = block_activation_bytes(m, s, kinds[k].index) - row;
  std::int64_t most = 0;
  for (const BlockRange& c : chunks) most = std::max(most, c.count);
  double bytes = static_cast<double>(most) * row;
  for (std::int64_t j = 0; j < most; ++j) {
    double held = 0;
    for (const BlockRange& c : chunks) {
      if (j >= c.count) continue;
      const double need = kind_bytes[m.is_moe_block(c.first + j) ? 1 : 0];
      if (need > held) bytes += need, held = need;
    }
  }
  bytes += row;
  if (head) bytes += 2 * row + (m.rms_norm() ? 1 : 2) * statistic;
  if (embedding && m.embedding_norm()) bytes += row + 2 * statistic;
  return bytes;
}

}  // namespace kintsugi
