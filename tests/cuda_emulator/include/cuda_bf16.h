#pragma once
// bfloat16 for the CPU emulator: storage and the round-to-nearest-even conversions.
#include <cstdint>

#include "kintsugi/core/half.hpp"

struct __nv_bfloat16 {
  std::uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 v) { return kintsugi::bf16_to_float(v.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) { return {kintsugi::float_to_bf16(v)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return {bits}; }
