#pragma once
// What the ops' entry points (backend/ops_*.cpp) share: a tensor read as a matrix, the bytes of
// tensors, and an OpCall for the usual kinds of op. Private to those files.
#include <cstdint>

#include "kintsugi/backend/backend.hpp"

namespace kintsugi::op_entry {

inline std::int64_t cols(const Tensor& t) {
  KINTSUGI_ASSERT(t.shape.rank > 0);
  return t.shape[t.shape.rank - 1];
}
inline std::int64_t rows(const Tensor& t) { return t.numel() / cols(t); }

inline double bytes(const Tensor& t) { return static_cast<double>(t.bytes()); }
inline double bytes(const Tensor* t) { return t ? bytes(*t) : 0; }
// `n` elements of t's type.
inline double bytes(const Tensor& t, std::int64_t n) {
  return static_cast<double>(n) * static_cast<double>(size_of(t.dtype));
}

// The rows x columns of a matrix (a vector's one dimension).
inline Shape matrix(const Tensor& t) {
  return t.shape.rank <= 1 ? t.shape : Shape{rows(t), cols(t)};
}
// An op described by its main tensor (OpCall::dims).
inline OpCall op_call(const char* name, double flops, double moved, const Tensor& main) {
  return OpCall{name, flops, moved, matrix(main), main.dtype};
}
// Attention and RoPE: batch x seq x heads x head_dim.
inline OpCall attention_call(const char* name, double flops, double moved,
                             const AttentionShape& s, const Tensor& qkv) {
  return OpCall{name, flops, moved, Shape{s.batch, s.seq, s.heads, s.head_dim}, qkv.dtype};
}

}  // namespace kintsugi::op_entry
