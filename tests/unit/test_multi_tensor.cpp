// The multi-range ops (Backend::adamw_step_multi, sum_squares_multi) on the CPU backend against
// the single-range ops they replace, range by range: the same bits, for every element-type mix
// the training step uses, ragged ranges (chunk-sized, one past, one short, a single element,
// empty) at misaligned starts with gaps between them. And a training step with them against one
// without (KINTSUGI_MULTI_TENSOR=0), bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kintsugi/core/host_io.hpp"
#include "kintsugi/optim/adamw.hpp"
#include "kintsugi/optim/multi_tensor.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/train/trainer.hpp"
#include "support/model_weights.hpp"
#include "support/test_paths.hpp"

namespace kintsugi {
namespace {

using testing::weights_of;

std::vector<float> random_floats(std::int64_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<std::byte> bytes_of(const Buffer& b) {
  return {b.data(), b.data() + b.size()};
}

// Ragged lengths around the kernels' chunk sizes (AdamW 2048, sums of squares 65536).
const std::vector<std::int64_t> kAdamWLengths = {1, 7, 2047, 2048, 2049, 0, 5000, 3, 70001, 1600};
const std::vector<std::int64_t> kSquaresLengths = {1, 0, 7, 65535, 65536, 65537, 1600, 200003, 3};

// Flat buffers cut into ranges the way a model's are: weights, gradients and working copies at
// the ranges' offsets in their own buffers (here with a one-element shift, so most starts are
// misaligned, and a gap of 3 elements after each range), the moments packed.
struct AdamWState {
  Buffer param, grad, m, v, copy;
  std::vector<AdamWRange> ranges;

  AdamWState(Backend& b, DType master, DType grad_type, DType copy_type, bool with_copy,
             const std::vector<std::int64_t>& lengths) {
    std::int64_t spread = 1, packed = 0;
    for (std::int64_t n : lengths) {
      spread += n + 3;
      packed += n;
    }
    auto make = [&](DType t, std::int64_t n, unsigned seed, float lo, float hi) {
      Buffer buf = b.allocate(MemoryKind::workspace, static_cast<std::size_t>(n) * size_of(t));
      write_values(random_floats(n, seed, lo, hi).data(), buf.view(t, Shape{n}));
      return buf;
    };
    param = make(master, spread, 1, -1, 1);
    grad = make(grad_type, spread, 2, -3, 3);
    m = make(master, packed, 3, -0.1f, 0.1f);
    v = make(master, packed, 4, 0, 0.2f);
    if (with_copy) copy = make(copy_type, spread, 5, -1, 1);
    std::int64_t at = 1, state = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const std::int64_t n = lengths[i];
      auto view = [&](const Buffer& buf, DType t, std::int64_t offset) {
        return buf.view(t, Shape{n}, static_cast<std::size_t>(offset) * size_of(t));
      };
      ranges.push_back({.param = view(param, master, at),
                        .grad = view(grad, grad_type, at),
                        .m = view(m, master, state),
                        .v = view(v, master, state),
                        .working_copy = with_copy ? view(copy, copy_type, at) : Tensor{},
                        .decay = i % 3 != 1});
      at += n + 3;
      state += n;
    }
  }
  std::vector<std::vector<std::byte>> contents() const {
    std::vector<std::vector<std::byte>> out = {bytes_of(param), bytes_of(grad), bytes_of(m),
                                               bytes_of(v)};
    if (copy.size()) out.push_back(bytes_of(copy));
    return out;
  }
};

struct TypeMix {
  DType master, grad, copy;
  bool with_copy;
};

// f32 training (no working copy), mixed precision with f32 or 16-bit gradients and a bf16, f16
// (or f32) working copy, and the all-f64 gradient checks.
const TypeMix kMixes[] = {{DType::f32, DType::f32, DType::f32, false},
                          {DType::f32, DType::f32, DType::bf16, true},
                          {DType::f32, DType::bf16, DType::bf16, true},
                          {DType::f32, DType::f32, DType::f16, true},
                          {DType::f32, DType::f16, DType::f16, true},
                          {DType::f32, DType::f32, DType::f32, true},
                          {DType::f64, DType::f64, DType::f64, false}};

TEST(MultiTensor, AdamWEqualsOneStepPerRangeBitForBit) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  for (const TypeMix& t : kMixes) {
    const std::string what = std::string(name_of(t.master)) + " master, " +
                             std::string(name_of(t.grad)) + " grad, " +
                             (t.with_copy ? std::string(name_of(t.copy)) : "no") + " copy";
    AdamWState multi(*backend, t.master, t.grad, t.copy, t.with_copy, kAdamWLengths);
    AdamWState single(*backend, t.master, t.grad, t.copy, t.with_copy, kAdamWLengths);
    ASSERT_EQ(multi.contents(), single.contents()) << what;
    AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                 .grad_scale = 0.37};
    for (h.step = 1; h.step <= 3; ++h.step) {
      backend->adamw_step_multi(multi.ranges, h);
      for (const AdamWRange& r : single.ranges) {
        AdamWHyper hr = h;
        hr.weight_decay = r.decay ? h.weight_decay : 0.0;
        backend->adamw_step(r.param, r.grad, r.m, r.v, hr,
                            r.working_copy.empty() ? nullptr : &r.working_copy);
      }
    }
    const auto a = multi.contents(), b = single.contents();
    const char* names[] = {"weights", "gradients", "m", "v", "working copies"};
    for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << what << ": " << names[k];
    // The update did something.
    AdamWState fresh(*backend, t.master, t.grad, t.copy, t.with_copy, kAdamWLengths);
    EXPECT_NE(bytes_of(fresh.param), bytes_of(multi.param)) << what;
  }
}

TEST(MultiTensor, AdamWDecayFollowsEachRange) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const std::vector<std::int64_t> lengths = {5, 5};
  AdamWState with(*backend, DType::f32, DType::f32, DType::f32, false, lengths);
  AdamWState without(*backend, DType::f32, DType::f32, DType::f32, false, lengths);
  ASSERT_TRUE(with.ranges[0].decay);
  ASSERT_FALSE(with.ranges[1].decay);
  const AdamWHyper h{.lr = 1e-2, .weight_decay = 0.5};
  backend->adamw_step_multi(with.ranges, h);
  AdamWHyper none = h;
  none.weight_decay = 0;
  backend->adamw_step_multi(without.ranges, none);
  auto values = [](const AdamWRange& r) { return read_values(r.param); };
  EXPECT_NE(values(with.ranges[0]), values(without.ranges[0])) << "decayed range";
  EXPECT_EQ(values(with.ranges[1]), values(without.ranges[1])) << "range without decay";
}

TEST(MultiTensor, SumOfSquaresEqualsOneSumPerRangeBitForBit) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    std::int64_t total = 1;
    for (std::int64_t n : kSquaresLengths) total += n + 3;
    Buffer flat = backend->allocate(MemoryKind::workspace, total * size_of(t));
    write_values(random_floats(total, 7, -2, 2).data(), flat.view(t, Shape{total}));
    std::vector<Tensor> xs;
    std::int64_t at = 1;
    for (std::int64_t n : kSquaresLengths) {
      xs.push_back(flat.view(t, Shape{n}, static_cast<std::size_t>(at) * size_of(t)));
      at += n + 3;
    }
    double multi = 0.25, single = 0.25;  // sums accumulate onto what is there
    backend->sum_squares_multi(xs, Tensor{&multi, DType::f64, Shape{1}});
    for (const Tensor& x : xs) backend->sum_squares(x, Tensor{&single, DType::f64, Shape{1}});
    EXPECT_EQ(multi, single) << name_of(t);
    EXPECT_GT(multi, 0.25 + 1000) << name_of(t);
    double none = 0.5;
    backend->sum_squares_multi({}, Tensor{&none, DType::f64, Shape{1}});
    EXPECT_EQ(none, 0.5);
  }
}

// The loss scaler's overflow check reads the sum: an infinite or NaN gradient element in any
// range makes it infinite or NaN as the single-range sums do.
TEST(MultiTensor, SumOfSquaresKeepsNonFiniteGradients) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (float bad : {inf, -inf, nan, 70000.0f}) {  // 70000 is past f16's largest: inf there
      const std::vector<std::int64_t> lengths = {300, 70000, 5};
      std::vector<float> values = random_floats(70305, 9, -1, 1);
      values[300 + 65536 + 17] = bad;  // in the second chunk of the second range
      Buffer flat = backend->allocate(MemoryKind::workspace, 70305 * size_of(t));
      write_values(values.data(), flat.view(t, Shape{70305}));
      std::vector<Tensor> xs;
      std::int64_t at = 0;
      for (std::int64_t n : lengths) {
        xs.push_back(flat.view(t, Shape{n}, static_cast<std::size_t>(at) * size_of(t)));
        at += n;
      }
      double multi = 0, single = 0;
      backend->sum_squares_multi(xs, Tensor{&multi, DType::f64, Shape{1}});
      for (const Tensor& x : xs) backend->sum_squares(x, Tensor{&single, DType::f64, Shape{1}});
      const std::string what = std::string(name_of(t)) + ", " + std::to_string(bad);
      EXPECT_EQ(std::memcmp(&multi, &single, sizeof multi), 0) << what << ": " << multi << " "
                                                               << single;
      if (std::isnan(bad) || std::isinf(bad) || t == DType::f16)
        EXPECT_FALSE(std::isfinite(multi)) << what;
      else
        EXPECT_TRUE(std::isfinite(multi)) << what;
    }
  }
}

// The optimizer with the switch on and off (multi_tensor.hpp).
TEST(MultiTensor, OptimizerTakesEitherPathToTheSameBits) {
  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  std::vector<std::vector<std::byte>> results[2];
  for (bool on : {true, false}) {
    set_multi_tensor_ops(on);
    AdamWState s(*backend, DType::f32, DType::bf16, DType::bf16, true, kAdamWLengths);
    std::vector<AdamWSegment> segments;
    for (const AdamWRange& r : s.ranges)
      segments.push_back({.param = r.param, .grad = r.grad, .working_copy = r.working_copy,
                          .decay = r.decay});
    AdamW opt(*backend, segments, AdamWConfig{});
    for (int step = 0; step < 3; ++step) opt.step(1e-2, 0.5);
    results[on] = s.contents();
    const Tensor m = opt.moment(0, 0, opt.numel()), v = opt.moment(1, 0, opt.numel());
    results[on].push_back(std::vector<std::byte>(static_cast<std::byte*>(m.data),
                                                 static_cast<std::byte*>(m.data) + m.bytes()));
    results[on].push_back(std::vector<std::byte>(static_cast<std::byte*>(v.data),
                                                 static_cast<std::byte*>(v.data) + v.bytes()));
  }
  set_multi_tensor_ops(true);
  EXPECT_EQ(results[0], results[1]);
}

// A whole training step (gradient norm, clipping, AdamW over every parameter) with the
// multi-range ops and without: the same losses, gradient norms and weights, bit for bit.
// The bits of doubles (NaN included: an overflowed fp16 step's norm may be one).
std::vector<std::byte> bits(const std::vector<double>& v) {
  std::vector<std::byte> out(v.size() * sizeof(double));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(MultiTensor, TrainingStepsAreTheSameBitsEitherWay) {
  struct Case {
    const char* precision;
    double loss_scale;  // fp16 only; 0: the default
  };
  // fp16 with a loss scale that overflows the 16-bit gradients: the non-finite sum of squares
  // skips the steps (and halves the scale) on both paths alike.
  for (const Case c : {Case{"fp32", 0}, Case{"bf16", 0}, Case{"fp16", 0}, Case{"fp16", 1e30}}) {
    const std::string what = std::string(c.precision) + " loss scale " + std::to_string(c.loss_scale);
    std::vector<double> norms[2], losses[2];
    std::vector<bool> skipped[2];
    std::vector<std::byte> weights[2];
    for (bool on : {true, false}) {
      set_multi_tensor_ops(on);
      std::vector<std::string> sets = {"model.d_model=64", "model.seq_len=32",
                                       "train.global_batch=4", "train.micro_batch=2",
                                       std::string("train.precision=\"") + c.precision + "\""};
      if (c.loss_scale > 0) sets.push_back("train.loss_scale=" + std::to_string(c.loss_scale));
      RunConfig config =
          load_run_config(testing::configs_dir() + "/gpt-tiny.toml", sets);
      MemoryTracker memory;
      auto backend = make_cpu_backend(memory);
      Tracer tracer;
      const Place serial;
      StageModel model(*backend, config, serial, tracer);
      const std::int64_t T = config.model.seq_len, mb = config.train.micro_batch;
      auto sample = [&](int k, std::int32_t* tokens, std::int32_t* targets) {
        for (std::int64_t i = 0; i < mb * T; ++i) {
          tokens[i] = static_cast<std::int32_t>((i * 7 + k) % 97);
          targets[i] = static_cast<std::int32_t>((i * 7 + k + 7) % 97);
        }
      };
      for (int step = 0; step < 3; ++step) {
        // A clip threshold below the norm: the clip factor reaches every range.
        const auto r = model.train_step(sample, 2, 1.0 / (4.0 * T), 1e-3, 0.05);
        norms[on].push_back(r.grad_norm);
        losses[on].push_back(r.loss_sum);
        skipped[on].push_back(r.skipped);
      }
      weights[on] = weights_of(model);
    }
    set_multi_tensor_ops(true);
    if (c.loss_scale > 0) {
      EXPECT_TRUE(skipped[1][0]) << what << ": the overflow was not exercised";
      EXPECT_FALSE(std::isfinite(norms[1][0])) << what;
    } else {
      EXPECT_FALSE(skipped[1][0]) << what;
      EXPECT_GT(norms[1][0], 0.05) << what << ": the clipping was not exercised";
    }
    EXPECT_EQ(skipped[1], skipped[0]) << what;
    EXPECT_EQ(bits(norms[1]), bits(norms[0])) << what;
    EXPECT_EQ(bits(losses[1]), bits(losses[0])) << what;
    EXPECT_EQ(weights[1], weights[0]) << what;
  }
}

}  // namespace
}  // namespace kintsugi
