// The CUDA backend's multi-range ops (adamw_step_multi, sum_squares_multi) against the CPU
// backend in f64, range by range, and against the CUDA backend's own single-range ops bit for
// bit: every element-type mix the training step uses (f32 master weights and moments; f32, bf16
// or f16 gradients; a bf16, f16 or f32 working copy or none; all f64), ragged ranges around the
// kernels' slices (8192 elements a block) with ranges of one element, of 1600, empty ones, starts
// on and off 16-byte boundaries and gaps between ranges that must stay untouched.
#include <algorithm>
#include <cmath>
#include <limits>

#include "device_testing.hpp"

namespace kintsugi {
namespace {

using gpu_testing::OpTest;
using gpu_testing::Pair;

// A range: its length and where it starts in the flat buffers.
struct Range {
  std::int64_t at, n;
};

// Ranges of `lengths`, even ones starting at a multiple of 8 elements (16-byte aligned in every
// type: runs of 8), odd ones 3 past it, with gaps between them. The buffers' length comes last.
std::vector<Range> layout(const std::vector<std::int64_t>& lengths, std::int64_t* total) {
  std::vector<Range> out;
  std::int64_t end = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t at = (end + 5 + 7) / 8 * 8 + (i % 2 ? 3 : 0);
    out.push_back({at, lengths[i]});
    end = at + lengths[i];
  }
  *total = end + 5;
  return out;
}

Tensor slice(const Tensor& t, const Range& r) {
  return Tensor{static_cast<std::byte*>(t.data) + r.at * size_of(t.dtype), t.dtype, Shape{r.n},
                t.device};
}

std::vector<std::byte> bytes_of(const Tensor& t) {
  std::vector<std::byte> out(t.bytes());
  copy_to_host(t, out.data());
  return out;
}

const std::vector<std::int64_t> kLengths = {1,    7,     8191, 8192, 8193, 0,    1600,
                                            3,    20000, 1600, 2,    16389, 768};

struct TypeMix {
  DType master, grad, copy;  // copy u8: none
};

class CudaMultiTensor : public ::testing::Test, public OpTest {};

TEST_F(CudaMultiTensor, AdamWMatchesTheCpuAndTheSingleRangeKernels) {
  const TypeMix mixes[] = {{DType::f32, DType::f32, DType::u8},   {DType::f32, DType::f32, DType::bf16},
                           {DType::f32, DType::bf16, DType::bf16}, {DType::f32, DType::f32, DType::f16},
                           {DType::f32, DType::f16, DType::f16},  {DType::f32, DType::f32, DType::f32},
                           {DType::f64, DType::f64, DType::u8}};
  std::int64_t total = 0;
  const std::vector<Range> ranges = layout(kLengths, &total);
  for (const TypeMix& t : mixes) {
    const bool working = t.copy != DType::u8;
    const std::string what = std::string(name_of(t.master)) + " master, " +
                             std::string(name_of(t.grad)) + " grad, " +
                             (working ? std::string(name_of(t.copy)) : "no") + " copy";
    Pair param = input(t.master, {total}), grad = input(t.grad, {total});
    Pair m = input(t.master, {total}, 0.1), v = input(t.master, {total}, 0.1, 0.5);
    Pair copy = input(working ? t.copy : t.master, {total});
    // The same start for the single-range kernels, on the GPU.
    Pair param1 = output(t.master, {total}), m1 = output(t.master, {total});
    Pair v1 = output(t.master, {total}), copy1 = output(copy.gpu.dtype, {total});
    gpu().copy(param.gpu, param1.gpu);
    gpu().copy(m.gpu, m1.gpu);
    gpu().copy(v.gpu, v1.gpu);
    gpu().copy(copy.gpu, copy1.gpu);

    std::vector<AdamWRange> multi, single;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const Range& r = ranges[i];
      const bool decay = i % 3 != 1;
      multi.push_back({slice(param.gpu, r), slice(grad.gpu, r), slice(m.gpu, r), slice(v.gpu, r),
                       working ? slice(copy.gpu, r) : Tensor{}, decay});
      single.push_back({slice(param1.gpu, r), slice(grad.gpu, r), slice(m1.gpu, r),
                        slice(v1.gpu, r), working ? slice(copy1.gpu, r) : Tensor{}, decay});
    }
    AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                 .grad_scale = 0.5};
    for (h.step = 1; h.step <= 3; ++h.step) {  // the second and third find their table again
      gpu().adamw_step_multi(multi, h);
      for (std::size_t i = 0; i < ranges.size(); ++i) {
        AdamWHyper hr = h;
        hr.weight_decay = multi[i].decay ? h.weight_decay : 0.0;
        const AdamWRange& s = single[i];
        gpu().adamw_step(s.param, s.grad, s.m, s.v, hr, working ? &s.working_copy : nullptr);
        const Range& r = ranges[i];
        cpu().adamw_step(slice(param.cpu, r), slice(grad.cpu, r), slice(m.cpu, r),
                         slice(v.cpu, r), hr, nullptr);
      }
    }
    expect_near(param, "param, " + what);
    expect_near(m, "m, " + what);
    expect_near(v, "v, " + what);
    EXPECT_EQ(bytes_of(param.gpu), bytes_of(param1.gpu)) << "param, " << what;
    EXPECT_EQ(bytes_of(m.gpu), bytes_of(m1.gpu)) << "m, " << what;
    EXPECT_EQ(bytes_of(v.gpu), bytes_of(v1.gpu)) << "v, " << what;
    if (working) {
      for (const Range& r : ranges)  // the working copy is the updated weights rounded
        std::copy_n(param.cpu.as<double>() + r.at, r.n, copy.cpu.as<double>() + r.at);
      expect_near(copy, "working copy, " + what);
      EXPECT_EQ(bytes_of(copy.gpu), bytes_of(copy1.gpu)) << "working copy, " << what;
    }
  }
}

// Ranges of different types in one call take the single-range kernels range by range.
TEST_F(CudaMultiTensor, AdamWOfMixedTypesFallsBackToTheSameBits) {
  std::int64_t total = 0;
  const std::vector<Range> ranges = layout({100, 3000, 9000}, &total);
  Pair param = input(DType::f32, {total}), m = input(DType::f32, {total}, 0.1);
  Pair v = input(DType::f32, {total}, 0.1, 0.5), g32 = input(DType::f32, {total});
  Pair g16 = input(DType::bf16, {total}), copy = output(DType::bf16, {total});
  Pair param1 = output(DType::f32, {total}), m1 = output(DType::f32, {total});
  Pair v1 = output(DType::f32, {total}), copy1 = output(DType::bf16, {total});
  gpu().copy(param.gpu, param1.gpu);
  gpu().copy(m.gpu, m1.gpu);
  gpu().copy(v.gpu, v1.gpu);
  std::vector<AdamWRange> multi;
  const AdamWHyper h{.lr = 1e-2, .weight_decay = 0.1, .grad_scale = 0.5};
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    const Tensor& g = i == 1 ? g16.gpu : g32.gpu;  // a bf16 gradient among f32 ones
    multi.push_back({slice(param.gpu, r), slice(g, r), slice(m.gpu, r), slice(v.gpu, r),
                     slice(copy.gpu, r), i != 2});
    AdamWHyper hr = h;
    hr.weight_decay = i != 2 ? h.weight_decay : 0.0;
    const Tensor c1 = slice(copy1.gpu, r);
    gpu().adamw_step(slice(param1.gpu, r), slice(g, r), slice(m1.gpu, r), slice(v1.gpu, r), hr,
                     &c1);
  }
  gpu().adamw_step_multi(multi, h);
  EXPECT_EQ(bytes_of(param.gpu), bytes_of(param1.gpu));
  EXPECT_EQ(bytes_of(m.gpu), bytes_of(m1.gpu));
  EXPECT_EQ(bytes_of(v.gpu), bytes_of(v1.gpu));
  for (const Range& r : ranges)
    EXPECT_EQ(bytes_of(slice(copy.gpu, r)), bytes_of(slice(copy1.gpu, r)));
}

TEST_F(CudaMultiTensor, SumOfSquaresMatchesTheCpuAndTheSingleRangeSums) {
  std::int64_t total = 0;
  const std::vector<Range> ranges = layout(kLengths, &total);
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    Pair x = input(t, {total});
    std::vector<Tensor> gpu_xs;
    for (const Range& r : ranges) gpu_xs.push_back(slice(x.gpu, r));
    Pair multi = input(DType::f64, {1}), single = output(DType::f64, {1});
    gpu().copy(multi.gpu, single.gpu);  // sums accumulate onto what is there
    for (int call = 0; call < 2; ++call) {  // the second finds its table again
      gpu().sum_squares_multi(gpu_xs, multi.gpu);
      for (const Range& r : ranges) {
        gpu().sum_squares(slice(x.gpu, r), single.gpu);
        cpu().sum_squares(slice(x.cpu, r), multi.cpu);
      }
    }
    // The squares of f32, bf16 and f16 values are exact in f64 and summed in f64 on both sides,
    // in different orders: f64's tolerance (1e-12 relative), not the element type's.
    expect_near(multi, std::string("sum of squares, ") + std::string(name_of(t)), DType::f64);
    EXPECT_EQ(OpTest::fetch(multi.gpu), OpTest::fetch(single.gpu)) << name_of(t);
  }
  // Nothing to add: the sum stays as it was.
  Pair sum = input(DType::f64, {1});
  const std::vector<double> before = OpTest::fetch(sum.gpu);
  gpu().sum_squares_multi({}, sum.gpu);
  gpu().sum_squares_multi(std::vector<Tensor>{slice(sum.gpu, {0, 0})}, sum.gpu);
  EXPECT_EQ(OpTest::fetch(sum.gpu), before);
}

// The loss scaler's overflow check reads the sum: an infinite or NaN element in any range makes
// it infinite or NaN, as the single-range sums do, bit for bit.
TEST_F(CudaMultiTensor, SumOfSquaresKeepsNonFiniteElements) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (float bad : {inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
      Pair x = input(t, {20000});
      const std::vector<double> values = OpTest::fetch(x.gpu);
      std::vector<float> v(values.begin(), values.end());
      v[300 + 8192 + 5] = bad;  // in the second block of the second range
      write_values(v.data(), x.gpu);
      const std::vector<Tensor> xs = {slice(x.gpu, {0, 300}), slice(x.gpu, {300, 19000}),
                                      slice(x.gpu, {19300, 700})};
      Pair multi = output(DType::f64, {1}), single = output(DType::f64, {1});
      gpu().zero(multi.gpu);
      gpu().zero(single.gpu);
      gpu().sum_squares_multi(xs, multi.gpu);
      for (const Tensor& r : xs) gpu().sum_squares(r, single.gpu);
      const std::string what = std::string(name_of(t)) + ", " + std::to_string(bad);
      EXPECT_EQ(bytes_of(multi.gpu), bytes_of(single.gpu)) << what;
      const double sum = OpTest::fetch(multi.gpu)[0];
      EXPECT_TRUE(std::isnan(bad) ? std::isnan(sum) : sum == inf) << what << ": " << sum;
    }
  }
}

// Ranges with a working copy and ranges without (their copy absent) in one launch: the absent
// copies are not written, the rest as the single-range kernel computes it.
TEST_F(CudaMultiTensor, AdamWWithAndWithoutWorkingCopiesInOneCall) {
  std::int64_t total = 0;
  const std::vector<Range> ranges = layout({100, 9000, 3000, 17}, &total);
  Pair param = input(DType::f32, {total}), grad = input(DType::bf16, {total});
  Pair m = input(DType::f32, {total}, 0.1), v = input(DType::f32, {total}, 0.1, 0.5);
  Pair copy = output(DType::bf16, {total}), copy1 = output(DType::bf16, {total});
  Pair param1 = output(DType::f32, {total}), m1 = output(DType::f32, {total});
  Pair v1 = output(DType::f32, {total});
  gpu().copy(param.gpu, param1.gpu);
  gpu().copy(m.gpu, m1.gpu);
  gpu().copy(v.gpu, v1.gpu);
  const AdamWHyper h{.lr = 1e-2, .weight_decay = 0.1, .grad_scale = 0.5};
  std::vector<AdamWRange> multi;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    const bool with_copy = i % 2 == 1;
    multi.push_back({slice(param.gpu, r), slice(grad.gpu, r), slice(m.gpu, r), slice(v.gpu, r),
                     with_copy ? slice(copy.gpu, r) : Tensor{}, true});
    const Tensor c1 = slice(copy1.gpu, r);
    gpu().adamw_step(slice(param1.gpu, r), slice(grad.gpu, r), slice(m1.gpu, r),
                     slice(v1.gpu, r), h, with_copy ? &c1 : nullptr);
  }
  gpu().adamw_step_multi(multi, h);
  EXPECT_EQ(bytes_of(param.gpu), bytes_of(param1.gpu));
  EXPECT_EQ(bytes_of(m.gpu), bytes_of(m1.gpu));
  EXPECT_EQ(bytes_of(v.gpu), bytes_of(v1.gpu));
  // Both copies poisoned alike: written where a range has one, untouched elsewhere.
  EXPECT_EQ(bytes_of(copy.gpu), bytes_of(copy1.gpu));
  const std::vector<std::byte> poisoned = bytes_of(slice(copy.gpu, ranges[0]));
  EXPECT_TRUE(std::all_of(poisoned.begin(), poisoned.end(),
                          [](std::byte b) { return b == std::byte{0xff}; }));
}

TEST_F(CudaMultiTensor, SumOfSquaresOfMixedTypesFallsBackToTheSameBits) {
  Pair a = input(DType::f32, {9000}), b = input(DType::bf16, {777});
  Pair multi = output(DType::f64, {1}), single = output(DType::f64, {1});
  gpu().zero(multi.gpu);
  gpu().zero(single.gpu);
  gpu().sum_squares_multi(std::vector<Tensor>{a.gpu, b.gpu}, multi.gpu);
  gpu().sum_squares(a.gpu, single.gpu);
  gpu().sum_squares(b.gpu, single.gpu);
  EXPECT_EQ(OpTest::fetch(multi.gpu), OpTest::fetch(single.gpu));
}

}  // namespace
}  // namespace kintsugi
