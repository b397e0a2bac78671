#include "kintsugi/core/host_io.hpp"

#include <cstring>

#include "kintsugi/core/allocator.hpp"
#include "kintsugi/core/half.hpp"

namespace kintsugi {

namespace {

void convert_to_float(const void* src, DType dtype, std::int64_t n, float* out) {
  switch (dtype) {
    case DType::f32: std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::f64:
      for (std::int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(static_cast<const double*>(src)[k]);
      return;
    case DType::bf16:
      for (std::int64_t k = 0; k < n; ++k) out[k] = bf16_to_float(static_cast<const std::uint16_t*>(src)[k]);
      return;
    case DType::f16:
      for (std::int64_t k = 0; k < n; ++k) out[k] = f16_to_float(static_cast<const std::uint16_t*>(src)[k]);
      return;
    default: KINTSUGI_ASSERT(is_float(dtype));
  }
}

void convert_from_float(const float* values, std::int64_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst, values, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::f64:
      for (std::int64_t k = 0; k < n; ++k) static_cast<double*>(dst)[k] = values[k];
      return;
    case DType::bf16:
      for (std::int64_t k = 0; k < n; ++k) static_cast<std::uint16_t*>(dst)[k] = float_to_bf16(values[k]);
      return;
    case DType::f16:
      for (std::int64_t k = 0; k < n; ++k) static_cast<std::uint16_t*>(dst)[k] = float_to_f16(values[k]);
      return;
    default: KINTSUGI_ASSERT(is_float(dtype));
  }
}

}  // namespace

void copy_to_host(const Tensor& src, void* host) {
  if (src.bytes() == 0) return;
  allocator_for(src.device).copy_to_host(host, src.data, src.bytes());
}

void copy_from_host(const void* host, const Tensor& dst) {
  if (dst.bytes() == 0) return;
  allocator_for(dst.device).copy_from_host(dst.data, host, dst.bytes());
}

void read_values(const Tensor& src, float* out) {
  if (src.device == Device::cpu) return convert_to_float(src.data, src.dtype, src.numel(), out);
  std::vector<std::byte> staged(src.bytes());
  copy_to_host(src, staged.data());
  convert_to_float(staged.data(), src.dtype, src.numel(), out);
}

std::vector<float> read_values(const Tensor& src) {
  std::vector<float> out(static_cast<std::size_t>(src.numel()));
  read_values(src, out.data());
  return out;
}

void write_values(const float* values, const Tensor& dst) {
  if (dst.device == Device::cpu) return convert_from_float(values, dst.numel(), dst.dtype, dst.data);
  std::vector<std::byte> staged(dst.bytes());
  convert_from_float(values, dst.numel(), dst.dtype, staged.data());
  copy_from_host(staged.data(), dst);
}

double read_scalar(const Tensor& src) {
  KINTSUGI_ASSERT(src.numel() >= 1 && (src.dtype == DType::f64 || src.dtype == DType::f32));
  const Tensor first{src.data, src.dtype, Shape{1}, src.device};
  if (src.dtype == DType::f64) {
    double v = 0;
    copy_to_host(first, &v);
    return v;
  }
  float v = 0;
  copy_to_host(first, &v);
  return v;
}

void write_scalar(double value, const Tensor& dst) {
  KINTSUGI_ASSERT(dst.numel() == 1 && (dst.dtype == DType::f64 || dst.dtype == DType::f32));
  if (dst.dtype == DType::f64) return copy_from_host(&value, dst);
  const float f = static_cast<float>(value);
  copy_from_host(&f, dst);
}

}  // namespace kintsugi
