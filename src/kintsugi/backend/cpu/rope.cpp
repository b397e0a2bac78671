// Rotary position embeddings, in place on the packed qkv tensor (see AttentionShape). For a row
// at position t (first_position + its row in the sequence, or with document attention its row
// less its document's first row) and pair i < hd/2 the angle is t * inv_freq[i] (rotary.hpp); dimensions
// i and i + hd/2 of every query and key head rotate together (Hugging Face's rotate_half pairing, so Llama checkpoints need no
// permutation). The angles are computed in double and rounded once, so f32, bf16 and f16 runs
// rotate by the same cosines and sines whatever rank or thread handles a row.
#include <cmath>
#include <vector>

#include "kintsugi/backend/cpu/attention_common.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu {

namespace {

// Rotates the query and key heads of one token row (values are every (group + 2)-th head slot
// from the last, left alone). sign -1 rotates back.
template <class T>
void rotate_row(const AttentionShape& s, T* row, std::int64_t position, const RotaryTable& table,
                double sign) {
  const std::int64_t hd = s.head_dim, half = hd / 2, slots = s.heads / s.kv_heads + 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * table.inv_freq[i];
    const T c = static_cast<T>(table.scale * std::cos(angle)),
            sn = static_cast<T>(sign * table.scale * std::sin(angle));
    for (std::int64_t kv = 0; kv < s.kv_heads; ++kv)
      for (std::int64_t slot = 0; slot + 1 < slots; ++slot) {  // queries and the key
        T* head = row + (kv * slots + slot) * hd;
        const T x1 = head[i], x2 = head[i + half];
        head[i] = x1 * c - x2 * sn;
        head[i + half] = x2 * c + x1 * sn;
      }
  }
}

std::int64_t position_of(const AttentionShape& s, std::int64_t r) {
  const std::int64_t t = r % s.seq;
  return s.doc_start ? t - s.doc_start[r] : s.first_position + t;
}

std::int64_t row_width(const AttentionShape& s) {
  return s.kv_heads * (s.heads / s.kv_heads + 2) * s.head_dim;
}

}  // namespace

template <class T>
void rope(const AttentionShape& s, T* qkv, const RotaryTable& table, bool inverse) {
  const std::int64_t width = row_width(s);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < s.batch * s.seq; ++r)
    rotate_row(s, qkv + r * width, position_of(s, r), table, inverse ? -1.0 : 1.0);
}

template void rope<float>(const AttentionShape&, float*, const RotaryTable&, bool);
template void rope<double>(const AttentionShape&, double*, const RotaryTable&, bool);

namespace mixed {

void rope(const AttentionShape& s, AnyPtr qkv, const RotaryTable& table, bool inverse,
          ThreadWorkspace& ws) {
  const std::int64_t width = row_width(s);
  rows_with_thread_area(ws, width, s.batch * s.seq, [&](float* area) {
    return [&, area](std::int64_t r) {
      float* row = out_f32(qkv.at(r * width), width, area, true);
      rotate_row(s, row, position_of(s, r), table, inverse ? -1.0 : 1.0);
      write_back(qkv.at(r * width), width, row);
    };
  });
}

}  // namespace mixed

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table,
                         bool inverse) {
  const Kind kind = kind_of({&qkv});
  if (kind == Kind::mixed) return cpu::mixed::rope(s, AnyPtr(qkv), table, inverse, workspace_);
  typed(kind, [&]<class T>() { cpu::rope(s, qkv.as<T>(), table, inverse); });
}

}  // namespace kintsugi::cpu
