#pragma once
// Element types of tensors. f64 exists so that gradient checks run the very same kernels in
// double precision; bf16/f16 are storage types for mixed precision; i32 holds token ids; u8 is
// raw bytes (messages between ranks).
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kintsugi {

enum class DType : std::uint8_t { f32, f64, bf16, f16, u8, i32 };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

constexpr std::string_view name_of(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }

// The floating-point types (what float ops take).
constexpr bool is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

}  // namespace kintsugi
