#pragma once
// Helpers of the GPU tests: every op runs on the CUDA backend in the tested element types and on
// the CPU backend in f64 on the very same values (inputs are drawn, rounded to their type on the
// device, and read back exact), then the GPU's outputs are compared with the f64 results.
// Outputs start poisoned (all bits set: NaN in every float type) unless the op accumulates into
// them, so an element a kernel forgets to write fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cuda/cuda_backend.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/rng.hpp"

namespace kintsugi::gpu_testing {

// Normwise relative tolerance of a result computed with `dtype` tensors: max |gpu - f64| over
// max |f64|. fp32 without TF32 ~1e-5, bf16 ~1e-2, f16 a few ulps of its 11-bit mantissa.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    default: return 0;
  }
}

// The element types of one test run: activations (and weights) in `act`, statistics, logits and
// gradients of parameters in `stat` (f32 unless everything is f64), as mixed precision runs them.
// A GEMM's shape: (m x k) times (k x n).
struct Mnk {
  std::int64_t m, n, k;
};

struct Types {
  DType act, stat;
  std::string name() const { return std::string(name_of(act)) + "_" + std::string(name_of(stat)); }
};
inline std::vector<Types> all_types() {
  return {{DType::f64, DType::f64}, {DType::f32, DType::f32}, {DType::bf16, DType::f32},
          {DType::f16, DType::f32}};
}

// Host bits of any float type, as doubles (exact).
inline std::vector<double> to_doubles(const std::vector<std::byte>& bytes, DType t) {
  const std::size_t n = bytes.size() / size_of(t);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * size_of(t);
    std::uint16_t h;
    float f;
    double d;
    switch (t) {
      case DType::f32: std::memcpy(&f, p, 4); out[i] = f; break;
      case DType::f64: std::memcpy(&d, p, 8); out[i] = d; break;
      case DType::bf16: std::memcpy(&h, p, 2); out[i] = bf16_to_float(h); break;
      case DType::f16: std::memcpy(&h, p, 2); out[i] = f16_to_float(h); break;
      default: ADD_FAILURE() << "not a float type";
    }
  }
  return out;
}

// One tensor on both sides: the GPU's in its type, the CPU's in f64 holding the same values.
struct Pair {
  Buffer gpu_buffer, cpu_buffer;
  Tensor gpu, cpu;
};

class OpTest {
 public:
  OpTest()
      : gpu_(make_cuda_backend(gpu_memory_)), cpu_(make_cpu_backend(cpu_memory_)) {}
  Backend& gpu() { return *gpu_; }
  Backend& cpu() { return *cpu_; }

  // Random values (normal, times `scale`) rounded to `dtype`, the same on both sides.
  Pair input(DType dtype, Shape shape, double scale = 1.0, double offset = 0.0) {
    Pair p = make(dtype, shape);
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(offset + scale * normal_at(seed_, draws_, i));
    ++draws_;
    write_values(v.data(), p.gpu);
    set_cpu(p, fetch(p.gpu));
    return p;
  }
  // An output: poisoned on the GPU (zeros on the CPU), or random when the op accumulates.
  Pair output(DType dtype, Shape shape, bool accumulates = false) {
    if (accumulates) return input(dtype, shape);
    Pair p = make(dtype, shape);
    std::vector<std::byte> poison(p.gpu.bytes(), std::byte{0xff});
    copy_to_host_poison(p.gpu, poison);
    return p;
  }
  // An i32 tensor of ids on both sides.
  Pair ids(const std::vector<std::int32_t>& values) {
    const auto n = static_cast<std::int64_t>(values.size());
    Pair p = make(DType::i32, {n});
    copy_from_host(values.data(), p.gpu);
    std::memcpy(p.cpu.data, values.data(), values.size() * sizeof(std::int32_t));
    return p;
  }

  // Tensors made from now on start `elements` elements into their GPU buffer: with an odd count
  // they start off every 16-byte boundary, where kernels take no runs of 8 elements.
  void misalign(std::int64_t elements) { misalign_ = elements; }

  // Copies the GPU's values to the CPU side: a backward pass then starts from the forward's
  // outputs as the GPU computed them, on both sides.
  static void mirror(Pair& p) { set_cpu(p, fetch(p.gpu)); }

  // The tensor's values as doubles (exact), read from the GPU.
  static std::vector<double> fetch(const Tensor& t) {
    std::vector<std::byte> bytes(t.bytes());
    copy_to_host(t, bytes.data());
    return to_doubles(bytes, t.dtype);
  }
  static std::vector<double> values(const Tensor& cpu_f64) {
    return std::vector<double>(cpu_f64.as<double>(), cpu_f64.as<double>() + cpu_f64.numel());
  }

  // Expects the GPU tensor to hold the CPU's f64 values within the tolerance of `dtype` (by
  // default the GPU tensor's own type). Returns the normwise error.
  static double expect_near(const Pair& p, const std::string& what, DType dtype = DType::u8) {
    const DType t = dtype == DType::u8 ? p.gpu.dtype : dtype;
    const std::vector<double> got = fetch(p.gpu), want = values(p.cpu);
    double scale = 0, err = 0;
    std::int64_t worst = -1, bad = -1;
    for (std::size_t i = 0; i < got.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      if (!std::isfinite(got[i]) && bad < 0) bad = static_cast<std::int64_t>(i);
      if (std::abs(got[i] - want[i]) > err) {
        err = std::abs(got[i] - want[i]);
        worst = static_cast<std::int64_t>(i);
      }
    }
    EXPECT_LT(bad, 0) << what << ": element " << bad << " is " << (bad >= 0 ? got[bad] : 0.0)
                      << " (unwritten or overflowed), expected " << (bad >= 0 ? want[bad] : 0.0);
    const double rel = err / std::max(scale, 1e-30);
    EXPECT_LE(rel, tolerance(t)) << what << ": worst element " << worst << " is "
                                 << (worst >= 0 ? got[worst] : 0.0) << ", expected "
                                 << (worst >= 0 ? want[worst] : 0.0) << " (max |value| " << scale
                                 << ")";
    return rel;
  }

 private:
  Pair make(DType dtype, Shape shape) {
    Pair p;
    const std::size_t n = static_cast<std::size_t>(shape.numel());
    const std::size_t skip = static_cast<std::size_t>(misalign_) * size_of(dtype);
    p.gpu_buffer =
        gpu_->allocate(MemoryKind::workspace, std::max<std::size_t>(1, skip + n * size_of(dtype)));
    const DType host = dtype == DType::i32 ? DType::i32 : DType::f64;
    p.cpu_buffer = cpu_->allocate(MemoryKind::workspace, std::max<std::size_t>(1, n * size_of(host)));
    p.gpu = p.gpu_buffer.view(dtype, shape, skip);
    p.cpu = p.cpu_buffer.view(host, shape);
    return p;
  }
  static void set_cpu(Pair& p, const std::vector<double>& v) {
    std::copy(v.begin(), v.end(), p.cpu.as<double>());
  }
  static void copy_to_host_poison(const Tensor& t, const std::vector<std::byte>& poison) {
    copy_from_host(poison.data(), t);
  }

  MemoryTracker gpu_memory_, cpu_memory_;
  std::unique_ptr<Backend> gpu_, cpu_;
  std::uint64_t seed_ = 20261124, draws_ = 0;
  std::int64_t misalign_ = 0;
};

}  // namespace kintsugi::gpu_testing
