#pragma once
// The mixed-precision kernel tests' fixture: reference rounding written independently of the
// backend's, tensors of any float type set and read as f32, and compare(), which runs an op
// all-f32 and then with typed tensors and holds the outputs to the narrowest type's tolerance
// (see test_mixed_precision_kernels.cpp for the rules).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "op_helpers.hpp"

namespace kintsugi::mixed_test {

// ---- reference rounding, written independently of the backend's
inline float bf16_ref(float f) {  // nearest bf16, ties to even, by comparing the two neighbours
  if (std::isnan(f)) return f;
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const float lo = std::bit_cast<float>(u & 0xffff0000u);  // toward zero
  if (lo == f) return f;
  // The neighbour away from zero, in double: past the largest bf16 it is 2^128 (infinity).
  const int exponent = int((u >> 23) & 0xff);
  const double ulp = exponent == 0 ? 0x1p-133 : std::ldexp(1.0, exponent - 127 - 7);
  const double hi = double(lo) + std::copysign(ulp, f);
  const double dl = std::abs(double(f) - double(lo)), dh = std::abs(double(f) - hi);
  if (dl != dh) return dl < dh ? lo : static_cast<float>(hi);
  return (std::bit_cast<std::uint32_t>(lo) >> 16) % 2 == 0 ? lo : static_cast<float>(hi);
}
inline float f16_ref(float f) { return static_cast<float>(static_cast<_Float16>(f)); }
inline float round_to(DType t, float f) {
  return t == DType::bf16 ? bf16_ref(f) : t == DType::f16 ? f16_ref(f) : f;
}

// ---- tensors of any float type, set and read as f32
class Storage {
 public:
  Tensor make(DType dtype, Shape shape, const std::vector<float>& values) {
    EXPECT_EQ(static_cast<std::int64_t>(values.size()), shape.numel());
    blocks_.push_back(std::make_unique<std::vector<std::byte>>(values.size() * size_of(dtype)));
    Tensor t{blocks_.back()->data(), dtype, shape};
    for (std::size_t i = 0; i < values.size(); ++i) set(t, i, values[i]);
    return t;
  }
  static void set(const Tensor& t, std::size_t i, float v) {
    switch (t.dtype) {
      case DType::f32: static_cast<float*>(t.data)[i] = v; return;
      case DType::bf16:
        static_cast<std::uint16_t*>(t.data)[i] = std::bit_cast<std::uint32_t>(bf16_ref(v)) >> 16;
        return;
      case DType::f16: {
        const _Float16 h = static_cast<_Float16>(v);
        std::memcpy(static_cast<std::uint16_t*>(t.data) + i, &h, 2);
        return;
      }
      default: FAIL() << "unexpected dtype";
    }
  }
  static float get(const Tensor& t, std::size_t i) {
    switch (t.dtype) {
      case DType::f32: return static_cast<const float*>(t.data)[i];
      case DType::bf16:
        return std::bit_cast<float>(std::uint32_t(static_cast<const std::uint16_t*>(t.data)[i]) << 16);
      case DType::f16: {
        _Float16 h;
        std::memcpy(&h, static_cast<const std::uint16_t*>(t.data) + i, 2);
        return static_cast<float>(h);
      }
      default: return std::numeric_limits<float>::quiet_NaN();
    }
  }
  static std::vector<float> values(const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = get(t, i);
    return v;
  }

 private:
  std::vector<std::unique_ptr<std::vector<std::byte>>> blocks_;
};

inline std::vector<float> random_values(std::int64_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline double tolerance_of(DType t) {
  switch (t) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    default: return 1e-5;
  }
}

inline std::string describe(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType t : dtypes) s += std::string(s.empty() ? "" : ",") + std::string(name_of(t));
  return s;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : INFINITY;
    if (err > worst) worst = err, at = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst error " << worst << " at [" << at
                                << "] (got " << got[at] << ", want " << want[at]
                                << "), output scale " << scale << ", tolerance " << tol;
}

// One op on a set of tensors (and, for losses, doubles it writes).
using Op = std::function<void(Backend&, const std::vector<Tensor>&, std::vector<double>&)>;
struct Arg {
  Shape shape;
  std::vector<float> init;
};

class MixedPrecision : public ::testing::Test {
 protected:
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);

  // Runs `op` on tensors made from `args`, all f32 and then typed `dtypes`, and compares the
  // tensors at `outputs` (and the doubles) within the narrowest type's tolerance times `factor`.
  void compare(const std::string& what, const std::vector<Arg>& args,
               const std::vector<DType>& dtypes, const std::vector<int>& outputs, const Op& op,
               double factor = 1.0) {
    ASSERT_EQ(args.size(), dtypes.size());
    Storage ref_store, mixed_store;
    std::vector<Tensor> ref, mixed;
    double tol = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
      ref.push_back(ref_store.make(DType::f32, args[i].shape, args[i].init));
      mixed.push_back(mixed_store.make(dtypes[i], args[i].shape, args[i].init));
      tol = std::max(tol, tolerance_of(dtypes[i]));
    }
    std::vector<double> ref_extra, mixed_extra;
    op(*be, ref, ref_extra);
    op(*be, mixed, mixed_extra);
    const std::string label = what + " [" + describe(dtypes) + "]";
    for (int o : outputs)
      expect_close(Storage::values(mixed[o]), Storage::values(ref[o]), tol * factor,
                   label + " output " + std::to_string(o));
    if (!ref_extra.empty())
      expect_close(std::vector<float>(mixed_extra.begin(), mixed_extra.end()),
                   std::vector<float>(ref_extra.begin(), ref_extra.end()), tol * factor,
                   label + " losses");
  }
};

constexpr DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;

}  // namespace kintsugi::mixed_test
