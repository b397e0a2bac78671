#pragma once
// The arithmetic of a run (train.precision, train.grad_precision): which element types hold
// weights, activations and gradients. Mixed precision keeps f32 master weights and optimizer
// state whatever these say.
#include <array>
#include <cstdint>
#include <utility>

#include "kintsugi/core/dtype.hpp"
#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

// Weights and activations: f32, or 16-bit mixed precision (fp16 with dynamic loss scaling).
enum class Precision : std::uint8_t { fp32, bf16, fp16 };
// Gradients: accumulated in f32, or in the weights' own type ("param").
enum class GradPrecision : std::uint8_t { fp32, param };

template <>
struct EnumNames<Precision> {
  static constexpr std::array values = {std::pair{Precision::fp32, "fp32"},
                                        std::pair{Precision::bf16, "bf16"},
                                        std::pair{Precision::fp16, "fp16"}};
};
template <>
struct EnumNames<GradPrecision> {
  static constexpr std::array values = {std::pair{GradPrecision::fp32, "fp32"},
                                        std::pair{GradPrecision::param, "param"}};
};

// The element type of weights and activations.
constexpr DType compute_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}
// The element type of gradients.
constexpr DType grad_dtype(Precision p, GradPrecision g) {
  return g == GradPrecision::param ? compute_dtype(p) : DType::f32;
}
constexpr bool is_mixed(Precision p) { return p != Precision::fp32; }
// Bytes of one weight or activation element.
constexpr std::int64_t element_bytes(Precision p) {
  return static_cast<std::int64_t>(size_of(compute_dtype(p)));
}

}  // namespace kintsugi
