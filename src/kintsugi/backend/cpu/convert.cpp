#include "kintsugi/backend/cpu/convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cpu {

namespace {

// f64 -> f32 rounding to odd: the f32 toward zero with its last bit set when inexact. Rounding
// that to bf16/f16 (at least 13 bits shorter) then gives the correctly rounded f64 result,
// which plain f64 -> f32 -> 16-bit double rounding does not always.
float f64_to_f32_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(d)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

}  // namespace

void widen(const std::uint16_t* src, DType dtype, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  if (dtype == DType::bf16) {
#pragma omp simd
    for (i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
    return;
  }
  KINTSUGI_ASSERT(dtype == DType::f16);
#if defined(__F16C__)  // 8 at a time (GCC 12's 16-wide forms trip -Wmaybe-uninitialized)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void narrow(const float* src, DType dtype, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  if (dtype == DType::bf16) {
#pragma omp simd
    for (i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
    return;
  }
  KINTSUGI_ASSERT(dtype == DType::f16);
#if defined(__F16C__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void convert_n(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * size_of(src_dtype));
    return;
  }
  const bool half_src = src_dtype == DType::bf16 || src_dtype == DType::f16;
  const bool half_dst = dst_dtype == DType::bf16 || dst_dtype == DType::f16;
  if (src_dtype == DType::f32 && half_dst)
    return narrow(static_cast<const float*>(src), dst_dtype, static_cast<std::uint16_t*>(dst), n);
  if (half_src && dst_dtype == DType::f32)
    return widen(static_cast<const std::uint16_t*>(src), src_dtype, static_cast<float*>(dst), n);
  if (src_dtype == DType::f32 && dst_dtype == DType::f64) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<double*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = s[i];
    return;
  }
  if (src_dtype == DType::f64 && dst_dtype == DType::f32) {
    const auto* s = static_cast<const double*>(src);
    auto* d = static_cast<float*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
    return;
  }
  // The rest (bf16 <-> f16, f64 <-> 16-bit) goes through f32 in blocks: widening to f32 is
  // exact, and f64 sources are rounded to odd first (see above).
  KINTSUGI_ASSERT(half_src || half_dst);
  constexpr std::int64_t kBlock = 1024;
  float buf[kBlock];
  for (std::int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const std::int64_t len = std::min(kBlock, n - i0);
    if (src_dtype == DType::f64) {
      const auto* s = static_cast<const double*>(src) + i0;
      for (std::int64_t i = 0; i < len; ++i) buf[i] = f64_to_f32_odd(s[i]);
    } else {
      KINTSUGI_ASSERT(half_src);
      widen(static_cast<const std::uint16_t*>(src) + i0, src_dtype, buf, len);
    }
    if (dst_dtype == DType::f64) {
      auto* d = static_cast<double*>(dst) + i0;
      for (std::int64_t i = 0; i < len; ++i) d[i] = buf[i];
    } else {
      KINTSUGI_ASSERT(half_dst);
      narrow(buf, dst_dtype, static_cast<std::uint16_t*>(dst) + i0, len);
    }
  }
}

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_convert(const Tensor& src, const Tensor& dst) {
  if (src.dtype == dst.dtype) return do_copy(src, dst);
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t n = src.numel();
  const auto* s = static_cast<const char*>(src.data);
  auto* d = static_cast<char*>(dst.data);
  const std::int64_t ss = size_of(src.dtype), ds = size_of(dst.dtype);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; i += kChunk)
    cpu::convert_n(s + i * ss, src.dtype, d + i * ds, dst.dtype, std::min(kChunk, n - i));
}

}  // namespace kintsugi::cpu
