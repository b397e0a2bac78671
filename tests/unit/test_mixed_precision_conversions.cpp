// Mixed precision: conversions between f32, f64, bf16 and f16 (rounding to nearest even, NaN,
// every f16 value), and properties of the implementation (scratch reuse, thread-count
// independence, f64 never mixed). Fixture and tolerances: mixed_precision_fixture.hpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "mixed_precision_fixture.hpp"
#include "op_helpers.hpp"

namespace kintsugi {
namespace {

using namespace mixed_test;

// ---- conversions

std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          1e-40f, -3e-39f, 65504.0f, 65519.0f, 65520.0f, 70000.0f, 6e-8f, 3e-8f,
                          2.9e-8f, 1e-5f, 3.0e38f, 3.4e38f};
  // Ties: 1 + 2^-8 (bf16 halfway, rounds to even 1), 1 + 3 * 2^-8 (rounds up to 1 + 2^-6),
  // 1 + 2^-11 and 1 + 3 * 2^-11 (the same for f16).
  for (float t : {0x1.01p0f, 0x1.03p0f, 0x1.002p0f, 0x1.006p0f}) v.push_back(t), v.push_back(-t);
  const auto r = random_values(5000, 47, 100.0f);
  v.insert(v.end(), r.begin(), r.end());
  for (float x : random_values(2000, 48)) v.push_back(x * 1e-6f);  // f16 subnormals
  return v;
}

TEST_F(MixedPrecision, ConvertRoundsToNearestEven) {
  const auto v = special_values();
  const std::int64_t n = static_cast<std::int64_t>(v.size());
  Storage st;
  for (DType t : {bf16, f16}) {
    Tensor src = st.make(f32, {n}, v);
    Tensor mid = st.make(t, {n}, std::vector<float>(n));
    Tensor back = st.make(f32, {n}, std::vector<float>(n));
    be->convert(src, mid);
    be->convert(mid, back);
    const auto got = Storage::values(back);
    for (std::int64_t i = 0; i < n; ++i) {
      const float want = round_to(t, v[i]);
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want))
          << name_of(t) << " of " << v[i] << " gave " << got[i] << ", want " << want;
    }
  }
}

TEST_F(MixedPrecision, ConvertKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {nan, -nan, std::bit_cast<float>(0x7f800001u) /* signalling */};
  Storage st;
  for (DType t : {bf16, f16}) {
    Tensor src = st.make(f32, {3}, {0, 0, 0});
    std::memcpy(src.data, v.data(), 12);
    Tensor mid = st.make(t, {3}, {0, 0, 0}), back = st.make(f32, {3}, {0, 0, 0});
    be->convert(src, mid);
    be->convert(mid, back);
    for (float x : Storage::values(back)) EXPECT_TRUE(std::isnan(x)) << name_of(t);
  }
}

TEST_F(MixedPrecision, ConvertF16IsExactOnEveryF16Value) {
  // All 65536 f16 bit patterns: to f32 and back gives the same bits (NaNs stay NaN).
  const std::int64_t n = 1 << 16;
  std::vector<std::uint16_t> bits(n), back(n);
  std::vector<float> wide(n);
  for (std::int64_t i = 0; i < n; ++i) bits[i] = static_cast<std::uint16_t>(i);
  be->convert(Tensor{bits.data(), f16, {n}}, Tensor{wide.data(), f32, {n}});
  be->convert(Tensor{wide.data(), f32, {n}}, Tensor{back.data(), f16, {n}});
  for (std::int64_t i = 0; i < n; ++i) {
    _Float16 h;
    std::memcpy(&h, &bits[i], 2);
    if (std::isnan(static_cast<float>(h))) {
      EXPECT_TRUE(std::isnan(wide[i]));
      EXPECT_EQ(back[i] & 0x7c00, 0x7c00);
      EXPECT_NE(back[i] & 0x03ff, 0);
      continue;
    }
    EXPECT_EQ(std::bit_cast<std::uint32_t>(wide[i]),
              std::bit_cast<std::uint32_t>(static_cast<float>(h))) << "f16 bits " << i;
    EXPECT_EQ(back[i], bits[i]) << "f16 bits " << i;
  }
}

TEST_F(MixedPrecision, ConvertBetween16BitTypesAndF64) {
  // bf16 <-> f16 and f64 -> 16-bit round once, from the exact value.
  Storage st;
  const auto v = special_values();
  const std::int64_t n = static_cast<std::int64_t>(v.size());
  Tensor b = st.make(bf16, {n}, v), h = st.make(f16, {n}, std::vector<float>(n));
  be->convert(b, h);
  const auto bv = Storage::values(b), hv = Storage::values(h);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(hv[i]), std::bit_cast<std::uint32_t>(f16_ref(bv[i])))
        << "bf16 -> f16 of " << bv[i];
  // 1 + 2^-8 + 2^-40 lies just above a bf16 tie: rounding through f32 first would land on the
  // tie and round down to 1; the correct result is 1 + 2^-7. 1 + 2^-11 + 2^-40 is the same trap
  // for f16 (correct: 1 + 2^-10).
  std::vector<double> d = {1.0 + 0x1p-8 + 0x1p-40, -(1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-8,
                           1.0 + 0x1p-11 + 0x1p-40, 1e300, -1e-300, 0.1};
  const std::int64_t dn = static_cast<std::int64_t>(d.size());
  Tensor db = st.make(bf16, {dn}, std::vector<float>(dn)), dh = st.make(f16, {dn}, std::vector<float>(dn));
  be->convert(Tensor{d.data(), DType::f64, {dn}}, db);
  be->convert(Tensor{d.data(), DType::f64, {dn}}, dh);
  const std::vector<float> want_b = {0x1.02p0f, -0x1.02p0f, 1.0f, 1.0f, INFINITY, -0.0f,
                                     bf16_ref(0.1f)};
  const std::vector<float> want_h = {0x1.01p0f, -0x1.01p0f, 0x1.01p0f, 0x1.004p0f, INFINITY,
                                     -0.0f, f16_ref(0.1f)};
  EXPECT_EQ(Storage::values(db), want_b);
  EXPECT_EQ(Storage::values(dh), want_h);
  std::vector<double> round_trip(dn);
  be->convert(db, Tensor{round_trip.data(), DType::f64, {dn}});
  for (std::int64_t i = 0; i < dn; ++i) EXPECT_EQ(round_trip[i], double(want_b[i]));
}

// ---- properties of the implementation

TEST_F(MixedPrecision, ScratchIsReusedAcrossCalls) {
  Storage st;
  const std::int64_t m = 96, k = 64, n = 80;
  Tensor x = st.make(bf16, {m, k}, random_values(m * k, 49)),
         w = st.make(bf16, {n, k}, random_values(n * k, 50)),
         y = st.make(bf16, {m, n}, std::vector<float>(m * n));
  const AttentionShape s{2, 40, 2, 2, 16};
  Tensor qkv = st.make(bf16, {2 * 40 * 96}, random_values(2 * 40 * 96, 51)),
         out = st.make(bf16, {2 * 40 * 32}, std::vector<float>(2 * 40 * 32)),
         lse = st.make(f32, {160}, std::vector<float>(160)),
         dqkv = st.make(bf16, {2 * 40 * 96}, std::vector<float>(2 * 40 * 96));
  auto step = [&] {
    be->linear_forward(x, w, nullptr, y);
    be->attention_forward(s, qkv, out, lse);
    be->attention_backward(s, qkv, out, lse, out, dqkv);
  };
  step();
  const std::size_t peak = memory.peak(MemoryKind::workspace);
  step();
  step();
  EXPECT_EQ(memory.peak(MemoryKind::workspace), peak);
}

TEST_F(MixedPrecision, ResultsDoNotDependOnThreadCount) {
  Storage st;
  const std::int64_t m = 300, k = 200, n = 500;
  const AttentionShape s{2, 70, 4, 2, 16};
  const std::int64_t qkv_n = 2 * 70 * 8 * 16, out_n = 2 * 70 * 4 * 16;
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = st.make(bf16, {m, k}, random_values(m * k, 52)),
           w = st.make(bf16, {n, k}, random_values(n * k, 53)),
           y = st.make(bf16, {m, n}, std::vector<float>(m * n)),
           dw = st.make(f32, {n, k}, std::vector<float>(n * k)),
           qkv = st.make(bf16, {qkv_n}, random_values(qkv_n, 54)),
           out = st.make(bf16, {out_n}, std::vector<float>(out_n)),
           lse = st.make(f32, {2 * 4 * 70}, std::vector<float>(2 * 4 * 70)),
           dqkv = st.make(bf16, {qkv_n}, std::vector<float>(qkv_n));
    be->linear_forward(x, w, nullptr, y);
    be->linear_backward_weight(y, x, dw, nullptr, false);
    be->attention_forward(s, qkv, out, lse);
    be->attention_backward(s, qkv, out, lse, out, dqkv);
    omp_set_num_threads(saved);
    std::vector<float> all;
    for (const Tensor* t : {&y, &dw, &out, &lse, &dqkv}) {
      const auto v = Storage::values(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  EXPECT_EQ(run(1), run(2));
}

// f16 linear layers widen to f32 and multiply with OpenBLAS (gemm_mixed.cpp), whose kernels'
// bits depend on how a product is split; the split must not follow the thread count. CTest
// reruns this under several OpenBLAS kernel sets (tests/CMakeLists.txt): under Haswell's, 4% of
// these values differed between 1 and 2 threads before the products went through the balanced
// GEMM.
TEST_F(MixedPrecision, ResultsDoNotDependOnThreadCountF16) {
  Storage st;
  const std::int64_t m = 300, k = 200, n = 500;
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = st.make(f16, {m, k}, random_values(m * k, 52)),
           w = st.make(f16, {n, k}, random_values(n * k, 53)),
           y = st.make(f16, {m, n}, std::vector<float>(m * n)),
           dx = st.make(f16, {m, k}, std::vector<float>(m * k)),
           dw = st.make(f32, {n, k}, std::vector<float>(n * k));
    be->linear_forward(x, w, nullptr, y);
    be->linear_backward_input(y, w, dx, false);
    be->linear_backward_weight(y, x, dw, nullptr, false);
    omp_set_num_threads(saved);
    std::vector<float> all;
    for (const Tensor* t : {&y, &dx, &dw}) {
      const auto v = Storage::values(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<float> one = run(1);
  for (const int threads : {2, 3})
    EXPECT_EQ(one, run(threads)) << threads << " threads";
}

TEST_F(MixedPrecision, F64CannotBeMixed) {
  std::vector<double> a(4), c(4);
  std::vector<float> b(4);
  EXPECT_THROW(be->add(Tensor{a.data(), DType::f64, {4}}, Tensor{b.data(), f32, {4}},
                       Tensor{c.data(), DType::f64, {4}}),
               Error);
}

}  // namespace
}  // namespace kintsugi
