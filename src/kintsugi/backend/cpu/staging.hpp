#pragma once
// How the mixed-precision kernels touch tensors whose element type (f32, bf16 or f16) is known
// only at run time: a typed pointer, and staging of short runs (a row, a column slice, a chunk)
// through f32 scratch. The dtype is switched on once per run, never per element, so the f32
// arithmetic in between is the very code of the f32 kernels and stays vectorized.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kintsugi/backend/cpu/convert.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/tensor.hpp"

namespace kintsugi::cpu {

struct AnyPtr {
  void* data = nullptr;
  DType dtype = DType::f32;

  AnyPtr() = default;
  AnyPtr(void* d, DType t) : data(d), dtype(t) {
    KINTSUGI_ASSERT(t == DType::f32 || t == DType::bf16 || t == DType::f16);
  }
  explicit AnyPtr(const Tensor& t) : AnyPtr(t.data, t.dtype) {}

  bool is_f32() const { return dtype == DType::f32; }
  AnyPtr at(std::int64_t i) const {
    return AnyPtr(static_cast<char*>(data) + i * static_cast<std::int64_t>(size_of(dtype)), dtype);
  }
  float* f32() const { return static_cast<float*>(data); }
  std::uint16_t* half() const { return static_cast<std::uint16_t*>(data); }

  // Single elements (row statistics, loss terms).
  float get(std::int64_t i) const {
    switch (dtype) {
      case DType::bf16: return bf16_to_f32(half()[i]);
      case DType::f16: return f16_to_f32(half()[i]);
      default: return f32()[i];
    }
  }
  void set(std::int64_t i, float v) const {
    switch (dtype) {
      case DType::bf16: half()[i] = f32_to_bf16(v); return;
      case DType::f16: half()[i] = f32_to_f16(v); return;
      default: f32()[i] = v;
    }
  }
};

// Elements [0, n) of src as f32: src's own memory when it holds f32, else widened into scratch.
inline const float* read_f32(AnyPtr src, std::int64_t n, float* scratch) {
  if (src.is_f32()) return src.f32();
  widen(src.half(), src.dtype, scratch, n);
  return scratch;
}

// Where to compute n f32 results bound for dst: dst itself when it holds f32, else scratch;
// with `load` the current values of dst are there first (read-modify-write, accumulation).
inline float* out_f32(AnyPtr dst, std::int64_t n, float* scratch, bool load) {
  if (dst.is_f32()) return dst.f32();
  if (load) widen(dst.half(), dst.dtype, scratch, n);
  return scratch;
}

// Rounds results computed at `f` (from out_f32) into dst; f32 destinations already hold them.
inline void write_back(AnyPtr dst, std::int64_t n, const float* f) {
  if (!dst.is_f32()) narrow(f, dst.dtype, dst.half(), n);
}

// The elementwise ops with two inputs and one output (add, GELU's backward, SwiGLU's forward):
// elements [0, n) in parallel chunks of kChunk, each staged through f32 on the stack, where
// f(a32, b32, out32, len) computes the chunk's len results. `out` may alias `a` or `b`: a chunk's
// inputs are staged before its results are written back.
template <std::int64_t kChunk, class F>
void binary_in_chunks(AnyPtr a, AnyPtr b, AnyPtr out, std::int64_t n, F f) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::int64_t len = std::min(kChunk, n - i0);
    float as[kChunk], bs[kChunk], os[kChunk];
    const float* ac = read_f32(a.at(i0), len, as);
    const float* bc = read_f32(b.at(i0), len, bs);
    float* oc = out_f32(out.at(i0), len, os, false);
    f(ac, bc, oc, len);
    write_back(out.at(i0), len, oc);
  }
}

// An optimizer's updated f32 master chunk [i0, i0 + n), copied into the working copy of the
// parameter (when there is one) at the working copy's type, while the chunk is still in cache.
inline void copy_to_working(const AnyPtr* working_copy, std::int64_t i0, const float* master,
                            std::int64_t n) {
  if (!working_copy) return;
  const AnyPtr wc = working_copy->at(i0);
  if (wc.is_f32())
    std::memcpy(wc.f32(), master, n * sizeof(float));
  else
    narrow(master, wc.dtype, wc.half(), n);
}

}  // namespace kintsugi::cpu
