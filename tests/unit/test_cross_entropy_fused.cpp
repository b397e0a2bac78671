// Backend::cross_entropy_fused on the CPU backend (the oracle of the CUDA kernel) against the
// three passes it replaces and against an f64 reference computed here: the same loss, the same
// gradient (bit for bit in f32 and f64, where both run the same row bodies in place; within one
// rounding of the reference in bf16/f16, where the three passes round the exponentials
// in between), padding columns never read and zeroed, ignored targets giving zero rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "mixed_precision_fixture.hpp"
#include "op_helpers.hpp"

namespace kintsugi {
namespace {

using mixed_test::round_to;
using mixed_test::Storage;
using testing::ids;

// Logits of one type, set and read as doubles (f64 held as such, others through Storage).
class Logits {
 public:
  Logits(DType dtype, std::int64_t rows, std::int64_t cols, const std::vector<double>& values)
      : dtype_(dtype), bytes_(static_cast<std::size_t>(rows * cols) * size_of(dtype)) {
    tensor_ = Tensor{bytes_.data(), dtype, Shape{rows, cols}};
    for (std::size_t i = 0; i < values.size(); ++i) set(i, values[i]);
  }
  const Tensor& tensor() const { return tensor_; }
  double get(std::size_t i) const {
    return dtype_ == DType::f64 ? tensor_.as<double>()[i] : Storage::get(tensor_, i);
  }
  void set(std::size_t i, double v) {
    if (dtype_ == DType::f64)
      tensor_.as<double>()[i] = v;
    else
      Storage::set(tensor_, i, static_cast<float>(v));
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<std::size_t>(tensor_.numel()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
  bool same_bits(const Logits& o) const { return bytes_ == o.bytes_; }

 private:
  DType dtype_;
  std::vector<std::byte> bytes_;
  Tensor tensor_;
};

DType statistics_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

struct Case {
  std::int64_t rows, cols, valid;
};

// Logits drawn from N(0, 3^2) (rounded to `dtype`), padding columns NaN (the op must never read
// them); targets spread over the real columns with some ignored (-1), the first and last column.
std::vector<double> draw_logits(const Case& c, DType dtype, std::uint32_t seed) {
  const std::vector<float> v = mixed_test::random_values(c.rows * c.cols, seed, 3.0f);
  std::vector<double> out(v.size());
  for (std::int64_t r = 0; r < c.rows; ++r)
    for (std::int64_t j = 0; j < c.cols; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * c.cols + j);
      out[i] = j < c.valid ? (dtype == DType::f64 ? double(v[i]) : round_to(dtype, v[i]))
                           : std::numeric_limits<double>::quiet_NaN();
    }
  return out;
}
std::vector<std::int32_t> draw_targets(const Case& c) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(c.rows));
  for (std::int64_t r = 0; r < c.rows; ++r)
    t[r] = static_cast<std::int32_t>((r * 7919 + 13) % c.valid);
  if (c.rows > 1) t[1] = -1;
  if (c.rows > 2) t[2] = static_cast<std::int32_t>(c.valid - 1);
  if (c.rows > 3) t[3] = 0;
  if (c.rows > 4) t[c.rows - 1] = -7;
  return t;
}

// The loss of each row and the gradient, in f64 from the stored values.
struct Reference {
  std::vector<double> losses, grad;
};
Reference reference(const Case& c, const std::vector<double>& x,
                    const std::vector<std::int32_t>& targets, double grad_scale) {
  Reference ref{std::vector<double>(c.rows, 0.0), std::vector<double>(x.size(), 0.0)};
  for (std::int64_t r = 0; r < c.rows; ++r) {
    if (targets[r] < 0) continue;
    const double* row = x.data() + r * c.cols;
    double mx = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j < c.valid; ++j) mx = std::max(mx, row[j]);
    for (std::int64_t j = 0; j < c.valid; ++j) sum += std::exp(row[j] - mx);
    ref.losses[r] = std::log(sum) + mx - row[targets[r]];
    for (std::int64_t j = 0; j < c.valid; ++j)
      ref.grad[r * c.cols + j] =
          grad_scale * (std::exp(row[j] - mx) / sum - (j == targets[r] ? 1.0 : 0.0));
  }
  return ref;
}

class CrossEntropyFused : public ::testing::TestWithParam<DType> {
 protected:
  // The three passes as LmHead runs them without vocabulary parallelism: statistics in f32
  // (f64 for f64 logits), then the finish. Returns the loss sum.
  double three_pass(const Tensor& logits, std::int64_t valid,
                    const std::vector<std::int32_t>& targets, bool backward, double gs) {
    const std::int64_t rows = logits.shape[0];
    const DType st = statistics_of(logits.dtype);
    std::vector<std::byte> stats(static_cast<std::size_t>(3 * rows) * size_of(st));
    auto stat = [&](int k) {
      return Tensor{stats.data() + k * rows * size_of(st), st, Shape{rows}};
    };
    double loss = 0;
    be->softmax_row_max(logits, valid, stat(0));
    be->softmax_row_sum(logits, valid, stat(0), ids(targets), 0, stat(1), stat(2), backward);
    be->cross_entropy_finish(logits, valid, stat(0), stat(1), stat(2), ids(targets), 0,
                             Tensor{&loss, DType::f64, Shape{1}}, backward, gs);
    return loss;
  }
  double fused(const Tensor& logits, std::int64_t valid, const std::vector<std::int32_t>& targets,
               bool backward, double gs, double start = 0) {
    double loss = start;
    be->cross_entropy_fused(logits, valid, ids(targets), Tensor{&loss, DType::f64, Shape{1}},
                            backward, gs);
    return loss;
  }

  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
};

// Relative tolerance of one element rounded to `t` after f32 arithmetic.
double element_tolerance(DType t) {
  switch (t) {
    case DType::f64: return 1e-13;
    case DType::f32: return 2e-6;
    case DType::bf16: return std::ldexp(1.0, -8) * 1.01;  // half a bf16 ulp is 2^-9
    default: return std::ldexp(1.0, -11) * 1.01;          // f16: half an ulp is 2^-12
  }
}

TEST_P(CrossEntropyFused, MatchesThreePassesAndTheF64Reference) {
  const DType dtype = GetParam();
  const double gs = 0.3;
  for (const Case& c : {Case{1, 1, 1}, Case{5, 8, 8}, Case{9, 517, 510}, Case{33, 1000, 997}}) {
    const std::string at = std::string(name_of(dtype)) + " " + std::to_string(c.rows) + "x" +
                           std::to_string(c.cols) + " valid " + std::to_string(c.valid);
    const std::vector<double> x = draw_logits(c, dtype, static_cast<std::uint32_t>(c.cols));
    const std::vector<std::int32_t> targets = draw_targets(c);
    const Reference ref = reference(c, x, targets, gs);
    double ref_sum = 0;
    for (double l : ref.losses) ref_sum += l;

    // Forward only: the loss, and the logits untouched.
    Logits a(dtype, c.rows, c.cols, x), b(dtype, c.rows, c.cols, x);
    const double forward = fused(b.tensor(), c.valid, targets, false, gs);
    EXPECT_TRUE(a.same_bits(b)) << at << ": forward changed the logits";
    EXPECT_NEAR(forward, ref_sum, 1e-5 * (1 + std::abs(ref_sum))) << at;
    // Accumulates onto what loss_sum holds.
    EXPECT_EQ(fused(b.tensor(), c.valid, targets, false, gs, 2.5), 2.5 + forward) << at;

    // Backward, against the three passes on a copy.
    const double loss3 = three_pass(a.tensor(), c.valid, targets, true, gs);
    const double loss = fused(b.tensor(), c.valid, targets, true, gs);
    EXPECT_EQ(loss, forward) << at << ": backward's loss differs from forward's";
    // The statistics are f32 (f64) in both, computed by the same row bodies: the same loss.
    EXPECT_EQ(loss, loss3) << at;
    if (dtype == DType::f32 || dtype == DType::f64) {
      EXPECT_TRUE(a.same_bits(b)) << at << ": gradient differs from the three passes'";
    }

    const std::vector<double> g = b.values(), g3 = a.values();
    const double tol = element_tolerance(dtype);
    // Absolute slack for the target's element, grad_scale * (p - 1): f32 cancellation.
    const double slack = gs * (dtype == DType::f64 ? 1e-14 : 1e-6);
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t j = 0; j < c.cols; ++j) {
        const std::size_t i = static_cast<std::size_t>(r * c.cols + j);
        if (j >= c.valid || targets[r] < 0) {
          ASSERT_EQ(g[i], 0.0) << at << ": row " << r << " column " << j
                               << (targets[r] < 0 ? " (ignored row)" : " (padding)");
          continue;
        }
        ASSERT_LE(std::abs(g[i] - ref.grad[i]), tol * std::abs(ref.grad[i]) + slack)
            << at << ": row " << r << " column " << j << " got " << g[i] << " want "
            << ref.grad[i];
        // The three passes round twice: within two of the fused one's roundings.
        ASSERT_LE(std::abs(g3[i] - ref.grad[i]), 2 * tol * std::abs(ref.grad[i]) + slack)
            << at << ": three passes, row " << r << " column " << j;
      }
    for (std::int64_t r = 0; r < c.rows; ++r) {
      if (targets[r] < 0) {
        EXPECT_EQ(ref.losses[r], 0.0);
      }
    }
  }
}

// Rows of -inf logits but for one or two (what a masked vocabulary gives): finite losses and
// gradients, nothing for the -inf columns.
TEST_P(CrossEntropyFused, OneFiniteLogit) {
  const DType dtype = GetParam();
  const Case c{2, 16, 12};
  std::vector<double> x(32, -INFINITY);
  x[5] = 1.5;
  x[16 + 11] = -2.0;
  x[16 + 3] = -3.0;
  const std::vector<std::int32_t> targets = {5, 11};
  Logits l(dtype, c.rows, c.cols, x);
  const double loss = fused(l.tensor(), c.valid, targets, true, 1.0);
  EXPECT_NEAR(loss, std::log1p(std::exp(-1.0)), 1e-6);
  // exp(-inf) is 0 in f64 and at most exp(-87) in the CPU's f32 exponential (math.hpp).
  const std::vector<double> g = l.values();
  for (int j = 0; j < 16; ++j) EXPECT_LE(std::abs(g[j]), 1e-37) << j;
  for (int j = 0; j < 16; ++j) EXPECT_TRUE(std::isfinite(g[16 + j])) << j;
  EXPECT_NEAR(g[16 + 11], std::exp(-2.0) / (std::exp(-2.0) + std::exp(-3.0)) - 1, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Types, CrossEntropyFused,
                         ::testing::Values(DType::f64, DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(name_of(info.param)); });

}  // namespace
}  // namespace kintsugi
