#pragma once
// Conversions between f32 and the 16-bit storage types of mixed precision. Arithmetic is always
// f32: kernels widen 16-bit inputs to f32 (exact) and round each f32 result to its output's type.
//   bf16: the upper half of an f32; rounding is to nearest, ties to even, computed on the bits
//         (so that GCC vectorizes it; the AVX512-BF16 instruction would flush subnormals).
//   f16:  IEEE binary16 with correct rounding (nearest, ties to even), through F16C when the
//         target has it, else bit manipulation that gives the same results.
// NaN stays NaN (made quiet) and infinities stay infinite in both directions.
#include <bit>
#include <cstdint>

#include "kintsugi/core/dtype.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kintsugi::cpu {

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even and carries into the exponent
  // when it must (largest finite values round up to infinity, as IEEE rounding does).
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

inline float f16_to_f32(std::uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  // Shift exponent and mantissa into place, rebias, then fix up infinities/NaN and subnormals.
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;
  std::uint32_t o = (h & 0x7fffu) << 13;
  const std::uint32_t exp = o & kShiftedExp;
  o += (127 - 15) << 23;
  if (exp == kShiftedExp) {
    o += (128 - 16) << 23;
  } else if (exp == 0) {  // subnormal: let the FPU normalize it
    o += 1u << 23;
    o = std::bit_cast<std::uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(o | (std::uint32_t(h & 0x8000u) << 16));
#endif
}

inline std::uint16_t f32_to_f16(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint32_t o;
  if (u >= (127u + 16) << 23) {  // >= 2^16: infinity, or NaN (made quiet)
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 113u << 23) {  // below 2^-14: subnormal or zero; the FPU adds and rounds
    constexpr std::uint32_t kMagic = ((127 - 15) + (23 - 10) + 1) << 23;
    o = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) + std::bit_cast<float>(kMagic)) -
        kMagic;
  } else {  // normal: rebias, round to nearest even on the 13 dropped bits (may reach inf)
    const std::uint32_t odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu + odd;
    o = u >> 13;
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
#endif
}

// Array conversions; `dtype` is the 16-bit side (bf16 or f16). Vectorized; parallel callers
// split the work themselves (these run on the calling thread).
void widen(const std::uint16_t* src, DType dtype, float* dst, std::int64_t n);
void narrow(const float* src, DType dtype, std::uint16_t* dst, std::int64_t n);
// Any float type to any other (f64, f32, bf16, f16), each value rounded once to dst's type.
void convert_n(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);

}  // namespace kintsugi::cpu
