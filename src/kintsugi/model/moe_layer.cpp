#include "kintsugi/model/moe_layer.hpp"

#include <array>
#include <string>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

// Registration order: the router, each expert's w1 (gate), w3 (up) and w2 (down), then the
// shared expert's gate, up and down and its sigmoid gate.
MoeLayer::MoeLayer(LayerContext& ctx, const MoeSpec& spec, MoeLossWeights weights)
    : ctx_(ctx), spec_(spec), weights_(weights) {
  const std::int64_t d = spec.d, h = spec.hidden;
  router_ = weight(spec.prefix + ".router", spec.experts, d, spec.init_std);
  for (std::int64_t e = 0; e < spec.experts; ++e) {
    const std::string p = spec.prefix + ".experts." + std::to_string(e);
    w1_.push_back(weight(p + ".w1", h, d, spec.init_std));
    w3_.push_back(weight(p + ".w3", h, d, spec.init_std));
    w2_.push_back(weight(p + ".w2", d, h, spec.residual_std));
  }
  if (spec.shared_hidden > 0) {
    const std::string p = spec.prefix + ".shared_expert";
    shared_gate_ = weight(p + ".gate", spec.shared_hidden, d, spec.init_std);
    shared_up_ = weight(p + ".up", spec.shared_hidden, d, spec.init_std);
    shared_down_ = weight(p + ".down", d, spec.shared_hidden, spec.residual_std);
    shared_router_ = weight(spec.prefix + ".shared_expert_gate", 1, d, spec.init_std);
  }
  losses_ = ctx.backend.allocate(MemoryKind::workspace, 4 * sizeof(double));
  reset_stats();
}

int MoeLayer::weight(const std::string& name, std::int64_t out, std::int64_t in, double std) {
  return ctx_.params.add({.name = name + ".weight",
                          .global_shape = {out, in},
                          .init = ParamInit::normal,
                          .init_std = std,
                          .weight_decay = true});
}

void MoeLayer::layout_workspace(Carver& c, const LayerContext& ctx, const MoeSpec& spec,
                                std::int64_t rows, BlockWorkspace& ws) {
  const DType dt = ctx.dtype;
  const std::int64_t routed = rows * spec.top_k, hs = spec.shared_hidden;
  ws.moe_logits = c.take(dt, {rows, spec.experts});
  ws.moe_d_logits = c.take(dt, {rows, spec.experts});
  ws.moe_counts = c.take(DType::i32, {spec.experts});
  ws.moe_d_rows = c.take(dt, {routed, spec.d});
  ws.moe_d_act = c.take(dt, {routed, spec.hidden});
  ws.moe_d_up = c.take(dt, {routed, spec.hidden});
  ws.moe_d_gates = c.take(ctx.statistics(), {rows, spec.top_k});
  if (hs == 0) return;
  ws.shared_d_out = c.take(dt, {rows, spec.d});
  ws.shared_d_act = c.take(dt, {rows, hs});
  ws.shared_d_up = c.take(dt, {rows, hs});
  ws.shared_d_logit = c.take(dt, {rows, 1});
}

void MoeLayer::linear(int w, const Tensor& in, const Tensor& out) const {
  ctx_.backend.linear_forward(in, ctx_.params.param(w), nullptr, out);
}

void MoeLayer::linear_backward(int w, const Tensor& dy, const Tensor& in, const Tensor* dx,
                               bool accumulate_dx) const {
  ParamStore& p = ctx_.params;
  const bool acc = p.accumulate_grad(w);
  // An expert no row of the micro-batch chose: a zero gradient, written or added as nothing.
  if (dy.numel() == 0) {
    if (!acc) ctx_.backend.zero(p.grad(w));
    return;
  }
  if (dx) ctx_.backend.linear_backward_input(dy, p.param(w), *dx, accumulate_dx);
  ctx_.backend.linear_backward_weight(dy, in, p.grad(w), nullptr, acc);
}

void MoeLayer::forward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& y,
                       const BlockWorkspace& ws, bool record) {
  Backend& be = ctx_.backend;
  const Tensor losses = losses_.view(DType::f64, Shape{2}, record ? 0 : 2 * sizeof(double));
  linear(router_, x, ws.moe_logits);
  be.moe_route(ws.moe_logits, spec_.top_k, spec_.renormalize, s.moe_probs, s.moe_lse,
               s.moe_experts, s.moe_gates, losses);
  be.moe_dispatch(s.moe_experts, s.moe_order, s.moe_position, ws.moe_counts);
  std::vector<std::int32_t> host(static_cast<std::size_t>(spec_.experts));
  copy_to_host(ws.moe_counts, host.data());
  if (static_cast<std::size_t>(slot) >= counts_.size()) counts_.resize(slot + 1);
  std::vector<std::int64_t>& counts = counts_[static_cast<std::size_t>(slot)];
  counts.assign(host.begin(), host.end());
  if (record) {
    ++micro_batches_;
    for (std::size_t e = 0; e < counts.size(); ++e) expert_rows_[e] += counts[e];
  }
  be.moe_gather(x, s.moe_order, s.moe_xp);
  // Each expert's SwiGLU on its rows: one GEMM per layer and expert (a grouped GEMM).
  std::int64_t first = 0;
  for (std::size_t e = 0; e < counts.size(); first += counts[e], ++e) {
    if (counts[e] == 0) continue;
    const Tensor in = s.moe_xp.rows(first, counts[e]);
    linear(w1_[e], in, s.moe_gate.rows(first, counts[e]));
    linear(w3_[e], in, s.moe_up.rows(first, counts[e]));
  }
  be.swiglu_forward(s.moe_gate, s.moe_up, s.moe_act);
  first = 0;
  for (std::size_t e = 0; e < counts.size(); first += counts[e], ++e)
    if (counts[e] > 0)
      linear(w2_[e], s.moe_act.rows(first, counts[e]), s.moe_yp.rows(first, counts[e]));
  be.moe_combine(s.moe_yp, s.moe_position, &s.moe_gates, y, false);
  if (shared_gate_ < 0) return;
  linear(shared_gate_, x, s.shared_gate);
  linear(shared_up_, x, s.shared_up);
  be.swiglu_forward(s.shared_gate, s.shared_up, s.shared_act);
  linear(shared_down_, s.shared_act, s.shared_out);
  linear(shared_router_, x, s.shared_logit);
  be.moe_shared_gate(s.shared_logit, s.shared_out, y);
}

Tensor MoeLayer::backward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& dy,
                          const BlockWorkspace& ws) {
  Backend& be = ctx_.backend;
  const std::vector<std::int64_t>& counts = counts_[static_cast<std::size_t>(slot)];
  const Tensor dx = ws.d_norm;
  // Through the combine: the routed outputs' gradient (in moe_d_rows) and the gates'.
  be.moe_combine_backward(dy, s.moe_yp, s.moe_order, s.moe_position, s.moe_gates, ws.moe_d_rows,
                          ws.moe_d_gates);
  auto rows = [&](const Tensor& t, std::int64_t first, std::size_t e) {
    return t.rows(first, counts[e]);
  };
  std::int64_t first = 0;
  for (std::size_t e = 0; e < counts.size(); first += counts[e], ++e) {
    const Tensor d_act = rows(ws.moe_d_act, first, e);
    linear_backward(w2_[e], rows(ws.moe_d_rows, first, e), rows(s.moe_act, first, e), &d_act,
                    false);
  }
  be.swiglu_backward(s.moe_gate, s.moe_up, ws.moe_d_act, ws.moe_d_act, ws.moe_d_up);
  // The routed inputs' gradient replaces the outputs' in moe_d_rows (all read by now).
  first = 0;
  for (std::size_t e = 0; e < counts.size(); first += counts[e], ++e) {
    const Tensor in = rows(s.moe_xp, first, e), d_in = rows(ws.moe_d_rows, first, e);
    linear_backward(w1_[e], rows(ws.moe_d_act, first, e), in, &d_in, false);
    linear_backward(w3_[e], rows(ws.moe_d_up, first, e), in, &d_in, true);
  }
  be.moe_combine(ws.moe_d_rows, s.moe_position, nullptr, dx, false);
  // The router: the gates' gradient, the load-balancing and z losses' (each micro-batch's
  // losses weigh its N rows of the step's tokens, as grad_scale does the token losses).
  const double rows_scale = static_cast<double>(x.shape[0]) * grad_scale_;
  be.moe_route_backward(s.moe_probs, s.moe_lse, s.moe_experts, s.moe_gates, ws.moe_d_gates,
                        spec_.renormalize, weights_.aux * rows_scale, weights_.z * rows_scale,
                        ws.moe_d_logits);
  linear_backward(router_, ws.moe_d_logits, x, &dx, true);
  if (shared_gate_ < 0) return dx;
  be.moe_shared_gate_backward(s.shared_logit, s.shared_out, dy, ws.shared_d_out,
                              ws.shared_d_logit);
  linear_backward(shared_router_, ws.shared_d_logit, x, &dx, true);
  linear_backward(shared_down_, ws.shared_d_out, s.shared_act, &ws.shared_d_act, false);
  be.swiglu_backward(s.shared_gate, s.shared_up, ws.shared_d_act, ws.shared_d_act,
                     ws.shared_d_up);
  linear_backward(shared_gate_, ws.shared_d_act, x, &dx, true);
  linear_backward(shared_up_, ws.shared_d_up, x, &dx, true);
  return dx;
}

MoeStats MoeLayer::stats() const {
  std::array<double, 2> sums{};
  copy_to_host(losses_.view(DType::f64, Shape{2}), sums.data());
  return {.aux_sum = sums[0], .z_sum = sums[1], .micro_batches = micro_batches_,
          .expert_rows = expert_rows_};
}

void MoeLayer::reset_stats() {
  ctx_.backend.zero(losses_.view(DType::f64, Shape{4}));
  micro_batches_ = 0;
  expert_rows_.assign(static_cast<std::size_t>(spec_.experts), 0);
}

}  // namespace kintsugi
