#pragma once
// IEEE half for the CPU emulator: storage and the round-to-nearest-even conversions.
#include <cstdint>

#include "kintsugi/core/half.hpp"

struct __half {
  std::uint16_t bits;
};
inline float __half2float(__half v) { return kintsugi::f16_to_float(v.bits); }
inline __half __float2half_rn(float v) { return {kintsugi::float_to_f16(v)}; }
inline unsigned short __half_as_ushort(__half v) { return v.bits; }
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }
