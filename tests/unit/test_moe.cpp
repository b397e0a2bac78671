// The mixture-of-experts ops (backend.hpp, docs/moe.md) against reference formulas and finite
// differences in f64: the router's softmax, top-k (ties to the lower index) and gates with and
// without renormalization, its load-balancing and z losses and their gradients; the dispatch
// order; the permutation and its gate-weighted inverse; the shared expert's gate.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/half.hpp"

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
// so the counts) held where it is: finite steps of 1e-6 do not change the choices. Softmax with
// and without renormalization (the plain op), then DeepSeek-style routing (docs/moe.md):
// sigmoid and softmax scores, with and without renormalization, a scale of 2.5, 3 groups of 2
// of which 2 are kept and a bias in the selection.
TEST_F(MoeOps, RouteGradient) {
  const std::int64_t n = 5, e = 6, k = 3;
  auto logits = t::random_vector(n * e, 21, 1.5), r = t::random_vector(n * k, 22);
  std::vector<double> probs(n * e), lse(n), gates(n * k), losses(2), d_logits(n * e);
  std::vector<std::int32_t> experts(n * k);
  std::vector<float> bias = {0.3f, -0.2f, 0.1f, 0.0f, -0.4f, 0.2f};
  const Tensor b{bias.data(), DType::f32, Shape{e}};
  const double a = 0.7, z = 0.3;
  std::vector<std::pair<MoeRouting, std::string>> cases = {
      {{.top_k = k, .renormalize = false}, "softmax"},
      {{.top_k = k, .renormalize = true}, "softmax, renormalized"}};
  for (bool sigmoid : {true, false})
    for (bool renormalize : {false, true})
      cases.push_back({{.top_k = k, .renormalize = renormalize, .sigmoid = sigmoid,
                        .scale = 2.5, .groups = 3, .topk_groups = 2},
                       std::string(sigmoid ? "sigmoid" : "softmax") + " groups bias scale" +
                           (renormalize ? ", renormalized" : "")});
  for (const auto& [rt, what] : cases) {
    const bool plain = rt.groups == 1;
    auto loss = [&] {
      losses.assign(2, 0.0);
      if (plain)  // the plain op's overload
        be->moe_route(t::view(logits, {n, e}), k, rt.renormalize, t::view(probs, {n, e}),
                      t::view(lse, {n}), ids(experts, {n, k}), t::view(gates, {n, k}),
                      t::view(losses, {2}));
      else
        be->moe_route(t::view(logits, {n, e}), rt, &b, t::view(probs, {n, e}), t::view(lse, {n}),
                      ids(experts, {n, k}), t::view(gates, {n, k}), t::view(losses, {2}));
      return t::dot(gates.data(), r.data(), n * k) + a * losses[0] + z * losses[1];
    };
    loss();
    be->moe_route_backward(t::view(probs, {n, e}), t::view(lse, {n}), ids(experts, {n, k}),
                           t::view(gates, {n, k}), t::view(r, {n, k}), rt, a, z,
                           t::view(d_logits, {n, e}));
    t::expect_gradient(loss, logits.data(), n * e, d_logits.data(), what.c_str());
  }
}

// DeepSeek-style routing (docs/moe.md, "DeepSeek-style routing"): sigmoid scores, the bias
// selecting but not gating, group-limited selection with ties to the lower group and expert,
// the scale, and the load-balancing loss over each row's normalized scores.
TEST_F(MoeOps, RouteSigmoidGroupsAndBias) {
  // 6 experts in 3 groups of 2. Row 0: logits chosen so that the groups' two-score sums are
  // group 0 = s(2) + s(1), group 1 = s(3) + s(-3) = 1, group 2 = s(2) + s(1) (a tie with
  // group 0: group 0 is kept). Row 1: group 0 holds the two largest scores.
  const std::int64_t n = 2, e = 6, k = 2;
  std::vector<double> logits = {2.0, 1.0, 3.0, -3.0, 1.0, 2.0,
                                0.5, 0.4, 0.3, 0.2, 0.1, -2.0};
  std::vector<float> bias = {0, 0, 0, 0, 0, 0};
  std::vector<double> probs(n * e), lse(n), gates(n * k), losses(2, 0.0);
  std::vector<std::int32_t> experts(n * k);
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  const MoeRouting rt{.top_k = k, .renormalize = true, .sigmoid = true, .scale = 2.5,
                      .groups = 3, .topk_groups = 1};
  const Tensor b{bias.data(), DType::f32, Shape{e}};
  auto route = [&] {
    losses.assign(2, 0.0);
    be->moe_route(t::view(logits, {n, e}), rt, &b, t::view(probs, {n, e}), t::view(lse, {n}),
                  ids(experts, {n, k}), t::view(gates, {n, k}), t::view(losses, {2}));
  };
  route();
  // Row 0 keeps group 0, experts 0 and 1, though expert 2 has the largest score.
  EXPECT_EQ(experts, (std::vector<std::int32_t>{0, 1, 0, 1}));
  // Gates: the scores over their sum, times 2.5.
  EXPECT_NEAR(gates[0], 2.5 * sig(2.0) / (sig(2.0) + sig(1.0)), 1e-14);
  EXPECT_NEAR(gates[1], 2.5 * sig(1.0) / (sig(2.0) + sig(1.0)), 1e-14);
  // probs holds the logits under the sigmoid; lse is the logits' log-sum-exp (the z-loss's).
  EXPECT_EQ(probs[2], 3.0);
  double s1 = 0;
  for (int i = 0; i < e; ++i) s1 += std::exp(logits[e + i]);
  EXPECT_NEAR(lse[1], std::log(s1), 1e-14);
  // aux = E / (N^2 K) sum_e count_e sum_n s[n, e] / sum_i s[n, i]; counts 2, 2, 0, 0, 0, 0.
  double row_sum[2] = {0, 0}, aux = 0;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < e; ++i) row_sum[r] += sig(logits[r * e + i]);
  for (int i = 0; i < 2; ++i)
    aux += 2 * (sig(logits[i]) / row_sum[0] + sig(logits[e + i]) / row_sum[1]);
  EXPECT_NEAR(losses[0], aux * e / (n * n * k), 1e-14);
  // The bias selects (expert 5 first in both rows, its group kept) but does not gate.
  bias[5] = 10.0f;
  route();
  EXPECT_EQ(experts, (std::vector<std::int32_t>{5, 4, 5, 4}));
  EXPECT_NEAR(gates[2], 2.5 * sig(-2.0) / (sig(-2.0) + sig(0.1)), 1e-14);
  EXPECT_NEAR(gates[3], 2.5 * sig(0.1) / (sig(-2.0) + sig(0.1)), 1e-14);
  // Without the bias and the groups: the plain top 2 by score (ties: the lower expert).
  const MoeRouting flat{.top_k = k, .renormalize = false, .sigmoid = true};
  logits[5] = 3.0;  // expert 5 ties expert 2
  losses.assign(2, 0.0);
  be->moe_route(t::view(logits, {n, e}), flat, nullptr, t::view(probs, {n, e}), t::view(lse, {n}),
                ids(experts, {n, k}), t::view(gates, {n, k}), t::view(losses, {2}));
  EXPECT_EQ(experts[0], 2);
  EXPECT_EQ(experts[1], 5);
  EXPECT_NEAR(gates[0], sig(3.0), 1e-14);
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

// Mixed precision (docs/moe.md, "Precision"): with bf16 or f16 activations beside f32
// statistics, every op computes on f32 copies, so each output is the f32 op's output on the
// same (widened) inputs, rounded once into its dtype: equal bit for bit.
TEST_F(MoeOps, HalfPrecisionOutputsAreTheF32OpsRounded) {
  const std::int64_t n = 6, e = 5, k = 2, d = 3;
  for (DType half : {DType::bf16, DType::f16}) {
    auto round = [&](std::vector<float> v) {  // onto the half type's grid
      for (float& x : v) x = half == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : f16_to_float(float_to_f16(x));
      return v;
    };
    auto to_half = [&](const std::vector<float>& v) {
      std::vector<std::uint16_t> h(v.size());
      for (std::size_t i = 0; i < v.size(); ++i)
        h[i] = half == DType::bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
      return h;
    };
    auto as_f32 = [&](const std::vector<std::uint16_t>& h) {
      std::vector<float> v(h.size());
      for (std::size_t i = 0; i < h.size(); ++i)
        v[i] = half == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
      return v;
    };
    auto hv = [&](std::vector<std::uint16_t>& h, Shape s) { return Tensor{h.data(), half, s}; };
    auto fv = [](std::vector<float>& v, Shape s) { return Tensor{v.data(), DType::f32, s}; };
    auto floats = [&](std::int64_t count, std::uint64_t seed) {
      const std::vector<double> r = t::random_vector(count, seed, 1.5);
      return round(std::vector<float>(r.begin(), r.end()));
    };
    // The router, in the run's dtype, against f32: the same choices, outputs rounded once.
    std::vector<float> logits = floats(n * e, 31), probs(n * e), lse(n), gates(n * k);
    std::vector<double> losses(2, 0.0), losses_half(2, 0.0);
    std::vector<std::int32_t> experts(n * k), experts_half(n * k);
    be->moe_route(fv(logits, {n, e}), k, true, fv(probs, {n, e}), fv(lse, {n}),
                  ids(experts, {n, k}), fv(gates, {n, k}), t::view(losses, {2}));
    std::vector<std::uint16_t> hl = to_half(logits), hp(n * e), hlse(n), hg(n * k);
    be->moe_route(hv(hl, {n, e}), k, true, hv(hp, {n, e}), hv(hlse, {n}),
                  ids(experts_half, {n, k}), hv(hg, {n, k}), t::view(losses_half, {2}));
    EXPECT_EQ(experts_half, experts);
    EXPECT_EQ(as_f32(hp), round(probs));
    EXPECT_EQ(as_f32(hlse), round(lse));
    EXPECT_EQ(as_f32(hg), round(gates));
    EXPECT_EQ(losses_half, losses);  // f64, from the same f32 probabilities
    // Its backward, with the gates' gradient in f32 (the run's statistics type).
    std::vector<float> d_gates = floats(n * k, 32), d_logits(n * e);
    std::vector<float> probs_r = round(probs), lse_r = round(lse), gates_r = round(gates);
    be->moe_route_backward(fv(probs_r, {n, e}), fv(lse_r, {n}), ids(experts, {n, k}),
                           fv(gates_r, {n, k}), fv(d_gates, {n, k}), true, 0.3, 0.2,
                           fv(d_logits, {n, e}));
    std::vector<std::uint16_t> hd(n * e);
    be->moe_route_backward(hv(hp, {n, e}), hv(hlse, {n}), ids(experts, {n, k}), hv(hg, {n, k}),
                           fv(d_gates, {n, k}), true, 0.3, 0.2, hv(hd, {n, e}));
    EXPECT_EQ(as_f32(hd), round(d_logits));
    // Gather, combine (accumulating into the output) and combine's backward.
    std::vector<std::int32_t> order(n * k), position(n * k), counts(e);
    be->moe_dispatch(ids(experts, {n, k}), ids(order, {n * k}), ids(position, {n * k}),
                     ids(counts, {e}));
    std::vector<float> x = floats(n * d, 33), xp(n * k * d);
    be->moe_gather(fv(x, {n, d}), ids(order, {n * k}), fv(xp, {n * k, d}));
    std::vector<std::uint16_t> hx = to_half(x), hxp(n * k * d);
    be->moe_gather(hv(hx, {n, d}), ids(order, {n * k}), hv(hxp, {n * k, d}));
    EXPECT_EQ(as_f32(hxp), xp);  // a copy: exact
    std::vector<float> out = floats(n * d, 34);
    std::vector<std::uint16_t> hout = to_half(out);
    const Tensor gates_f32 = fv(gates_r, {n, k});
    be->moe_combine(fv(xp, {n * k, d}), ids(position, {n * k}), &gates_f32, fv(out, {n, d}), true);
    const Tensor hgates = hv(hg, {n, k});
    be->moe_combine(hv(hxp, {n * k, d}), ids(position, {n * k}), &hgates, hv(hout, {n, d}), true);
    EXPECT_EQ(as_f32(hout), round(out));
    std::vector<float> dy = floats(n * d, 35), d_src(n * k * d), d_w(n * k);
    be->moe_combine_backward(fv(dy, {n, d}), fv(xp, {n * k, d}), ids(order, {n * k}),
                             ids(position, {n * k}), fv(gates_r, {n, k}), fv(d_src, {n * k, d}),
                             fv(d_w, {n, k}));
    std::vector<std::uint16_t> hdy = to_half(dy), hd_src(n * k * d);
    std::vector<float> hd_w(n * k);  // f32 beside half tensors: the gates' gradient
    be->moe_combine_backward(hv(hdy, {n, d}), hv(hxp, {n * k, d}), ids(order, {n * k}),
                             ids(position, {n * k}), hv(hg, {n, k}), hv(hd_src, {n * k, d}),
                             fv(hd_w, {n, k}));
    EXPECT_EQ(as_f32(hd_src), round(d_src));
    EXPECT_EQ(hd_w, d_w);
  }
}

}  // namespace
}  // namespace kintsugi
