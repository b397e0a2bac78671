// The mixture-of-experts ops (backend.hpp, docs/moe.md) against reference formulas and finite
// differences in f64: the router's softmax, top-k (ties to the lower index) and gates with and
// without renormalization, its load-balancing and z losses and their gradients; the dispatch
// order; the permutation and its gate-weighted inverse; the shared expert's gate.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"

namespace kintsugi {
namespace {

namespace t = testing;

class MoeOps : public ::testing::Test {
 protected:
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
};

Tensor ids(std::vector<std::int32_t>& v, Shape s) { return Tensor{v.data(), DType::i32, s}; }

TEST_F(MoeOps, RouteTopKTiesAndLosses) {
  // Row 0: experts 1 and 3 tie at the top, expert 0 and 2 below: the top 2 are 1 then 3.
  // Row 1: all equal: experts 0 and 1.
  const std::int64_t n = 2, e = 4, k = 2;
  std::vector<double> logits = {0.0, 2.0, -1.0, 2.0, 0.5, 0.5, 0.5, 0.5};
  std::vector<double> probs(n * e), lse(n), gates(n * k), losses(2, 0.0);
  std::vector<std::int32_t> experts(n * k);
  for (bool renormalize : {false, true}) {
    losses.assign(2, 0.0);
    be->moe_route(t::view(logits, {n, e}), k, renormalize, t::view(probs, {n, e}), t::view(lse, {n}),
                  ids(experts, {n, k}), t::view(gates, {n, k}), t::view(losses, {2}));
    EXPECT_EQ(experts, (std::vector<std::int32_t>{1, 3, 0, 1}));
    const double s0 = std::exp(0.0) + 2 * std::exp(2.0) + std::exp(-1.0);
    EXPECT_NEAR(lse[0], std::log(s0), 1e-14);
    EXPECT_NEAR(probs[1], std::exp(2.0) / s0, 1e-14);
    EXPECT_NEAR(gates[0], renormalize ? 0.5 : std::exp(2.0) / s0, 1e-14);
    EXPECT_NEAR(gates[3], renormalize ? 0.5 : 0.25, 1e-14);
    // aux = E / (N^2 K) sum_e count_e sum_n p[n, e]; counts 1, 2, 0, 1.
    const double count[] = {1, 2, 0, 1};
    double aux = 0;
    for (int x = 0; x < e; ++x) aux += count[x] * (probs[x] + probs[e + x]);
    EXPECT_NEAR(losses[0], aux * e / (n * n * k), 1e-14);
    EXPECT_NEAR(losses[1], (lse[0] * lse[0] + lse[1] * lse[1]) / n, 1e-14);
  }
}

// The gradient at the logits of sum_j r[n, j] gates[n, j] + a aux + b z, with the routing (and
// so the counts) held where it is: finite steps of 1e-6 do not change the choices.
TEST_F(MoeOps, RouteGradient) {
  const std::int64_t n = 5, e = 6, k = 2;
  auto logits = t::random_vector(n * e, 21, 1.5), r = t::random_vector(n * k, 22);
  std::vector<double> probs(n * e), lse(n), gates(n * k), losses(2), d_logits(n * e);
  std::vector<std::int32_t> experts(n * k);
  const double a = 0.7, b = 0.3;
  for (bool renormalize : {false, true}) {
    auto loss = [&] {
      losses.assign(2, 0.0);
      be->moe_route(t::view(logits, {n, e}), k, renormalize, t::view(probs, {n, e}), t::view(lse, {n}),
                    ids(experts, {n, k}), t::view(gates, {n, k}), t::view(losses, {2}));
      return t::dot(gates.data(), r.data(), n * k) + a * losses[0] + b * losses[1];
    };
    loss();
    be->moe_route_backward(t::view(probs, {n, e}), t::view(lse, {n}), ids(experts, {n, k}),
                           t::view(gates, {n, k}), t::view(r, {n, k}), renormalize, a, b,
                           t::view(d_logits, {n, e}));
    t::expect_gradient(loss, logits.data(), n * e, d_logits.data(),
                    renormalize ? "d_logits (renormalized)" : "d_logits");
  }
}

TEST_F(MoeOps, DispatchGroupsByExpertThenRow) {
  const std::int64_t n = 4, k = 2;
  std::vector<std::int32_t> experts = {2, 0, 0, 2, 1, 0, 2, 1};
  std::vector<std::int32_t> order(n * k), position(n * k), counts(3);
  be->moe_dispatch(ids(experts, {n, k}), ids(order, {n * k}), ids(position, {n * k}),
                   ids(counts, {3}));
  EXPECT_EQ(counts, (std::vector<std::int32_t>{3, 2, 3}));
  EXPECT_EQ(order, (std::vector<std::int32_t>{1, 2, 5, 4, 7, 0, 3, 6}));
  for (std::int32_t p = 0; p < n * k; ++p) EXPECT_EQ(position[order[p]], p);
}

// y = combine(gates, f(gather(x))) for an elementwise f stands in for the experts: the
// gradients at x (gather's backward is combine without weights), at the routed rows and at the
// gates.
TEST_F(MoeOps, PermuteCombineGradient) {
  const std::int64_t n = 5, k = 2, d = 3, m = n * k;
  std::vector<std::int32_t> experts = {1, 0, 2, 1, 0, 2, 1, 2, 0, 1}, order(m), position(m),
                            counts(3);
  be->moe_dispatch(ids(experts, {n, k}), ids(order, {m}), ids(position, {m}), ids(counts, {3}));
  auto x = t::random_vector(n * d, 31), gates = t::random_vector(m, 32), r = t::random_vector(n * d, 33);
  auto w = t::random_vector(m * d, 34);  // a per-row scale: "expert" p multiplies by w[p]
  std::vector<double> xp(m * d), yp(m * d), y(n * d);
  auto loss = [&] {
    be->moe_gather(t::view(x, {n, d}), ids(order, {m}), t::view(xp, {m, d}));
    for (std::int64_t i = 0; i < m * d; ++i) yp[i] = w[i] * xp[i];
    be->moe_combine(t::view(yp, {m, d}), ids(position, {m}), &static_cast<const Tensor&>(
                        t::view(gates, {n, k})), t::view(y, {n, d}), false);
    return t::dot(y.data(), r.data(), n * d);
  };
  loss();
  for (std::int64_t row = 0; row < n; ++row)
    for (std::int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (std::int64_t j = 0; j < k; ++j)
        want += gates[row * k + j] * w[position[row * k + j] * d + i] * x[row * d + i];
      EXPECT_NEAR(y[row * d + i], want, 1e-14);
    }
  std::vector<double> d_yp(m * d), d_gates(m), dx(n * d, 1.0);
  const Tensor g = t::view(gates, {n, k});
  be->moe_combine_backward(t::view(r, {n, d}), t::view(yp, {m, d}), ids(order, {m}),
                           ids(position, {m}), g, t::view(d_yp, {m, d}), t::view(d_gates, {n, k}));
  t::expect_gradient(loss, gates.data(), m, d_gates.data(), "d_gates");
  std::vector<double> d_xp(m * d);
  for (std::int64_t i = 0; i < m * d; ++i) d_xp[i] = w[i] * d_yp[i];
  be->moe_combine(t::view(d_xp, {m, d}), ids(position, {m}), nullptr, t::view(dx, {n, d}), false);
  t::expect_gradient(loss, x.data(), n * d, dx.data(), "dx");
  // accumulate adds the combination to what out holds.
  std::vector<double> twice = dx;
  be->moe_combine(t::view(d_xp, {m, d}), ids(position, {m}), nullptr, t::view(twice, {n, d}), true);
  for (std::int64_t i = 0; i < n * d; ++i) EXPECT_NEAR(twice[i], 2 * dx[i], 1e-14);
}

TEST_F(MoeOps, SharedGateGradient) {
  const std::int64_t n = 4, d = 5;
  auto logit = t::random_vector(n, 41, 2.0), shared = t::random_vector(n * d, 42),
       base = t::random_vector(n * d, 43), r = t::random_vector(n * d, 44);
  std::vector<double> out(n * d), d_shared(n * d), d_logit(n);
  auto loss = [&] {
    out = base;
    be->moe_shared_gate(t::view(logit, {n, 1}), t::view(shared, {n, d}), t::view(out, {n, d}));
    return t::dot(out.data(), r.data(), n * d);
  };
  loss();
  EXPECT_NEAR(out[7], base[7] + shared[7] / (1 + std::exp(-logit[1])), 1e-14);
  be->moe_shared_gate_backward(t::view(logit, {n, 1}), t::view(shared, {n, d}), t::view(r, {n, d}),
                               t::view(d_shared, {n, d}), t::view(d_logit, {n, 1}));
  t::expect_gradient(loss, logit.data(), n, d_logit.data(), "d_logit");
  t::expect_gradient(loss, shared.data(), n * d, d_shared.data(), "d_shared");
}

}  // namespace
}  // namespace kintsugi
