#include "kintsugi/model/moe_layer.hpp"

#include <array>
#include <string>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

// Registration order: the router, each expert's w1 (gate), w3 (up) and w2 (down), then the
// shared expert's gate, up and down and its sigmoid gate. Under expert parallelism the experts
// are this rank's E/P, in the expert store (the others stay in ctx.params in the same order).
MoeLayer::MoeLayer(LayerContext& ctx, const MoeSpec& spec, MoeLossWeights weights)
    : ctx_(ctx), spec_(spec), weights_(weights) {
  const std::int64_t d = spec.d, h = spec.hidden;
  const std::int64_t local = spec.experts / ctx.expert_ranks();
  first_expert_ = ctx.ep ? ctx.ep->rank() * local : 0;
  router_ = weight(ctx.params, spec.prefix + ".router", spec.experts, d, spec.init_std);
  ParamStore& store = expert_store();
  for (std::int64_t e = first_expert_; e < first_expert_ + local; ++e) {
    const std::string p = spec.prefix + ".experts." + std::to_string(e);
    w1_.push_back(weight(store, p + ".w1", h, d, spec.init_std));
    w3_.push_back(weight(store, p + ".w3", h, d, spec.init_std));
    w2_.push_back(weight(store, p + ".w2", d, h, spec.residual_std));
  }
  if (spec.shared_hidden > 0) {
    const std::string p = spec.prefix + ".shared_expert";
    shared_gate_ = weight(ctx.params, p + ".gate", spec.shared_hidden, d, spec.init_std);
    shared_up_ = weight(ctx.params, p + ".up", spec.shared_hidden, d, spec.init_std);
    shared_down_ = weight(ctx.params, p + ".down", d, spec.shared_hidden, spec.residual_std);
    shared_router_ = weight(ctx.params, spec.prefix + ".shared_expert_gate", 1, d, spec.init_std);
  }
  losses_ = ctx.backend.allocate(MemoryKind::workspace, 4 * sizeof(double));
  if (has_router_bias()) {
    router_bias_ = ctx.backend.allocate(MemoryKind::workspace,
                                        static_cast<std::size_t>(spec.experts) * sizeof(float));
    set_router_bias(std::vector<float>(static_cast<std::size_t>(spec.experts), 0.0f));
  }
  reset_stats();
}

MoeRouting MoeLayer::routing() const {
  return {.top_k = spec_.top_k, .renormalize = spec_.renormalize, .sigmoid = spec_.sigmoid,
          .scale = spec_.routed_scaling, .groups = spec_.groups,
          .topk_groups = spec_.topk_groups};
}

void MoeLayer::set_router_bias(const std::vector<float>& bias) {
  KINTSUGI_ASSERT(has_router_bias() && static_cast<std::int64_t>(bias.size()) == spec_.experts);
  copy_from_host(bias.data(), router_bias_.view(DType::f32, Shape{spec_.experts}));
}

int MoeLayer::weight(ParamStore& store, const std::string& name, std::int64_t out,
                     std::int64_t in, double std) {
  // Replicated over tp: under sequence parallelism each rank's gradient is its own rows'.
  return store.add({.name = name + ".weight",
                    .global_shape = {out, in},
                    .init = ParamInit::normal,
                    .init_std = std,
                    .weight_decay = true,
                    .sequence_parallel_grad = ctx_.tp.sequence_parallel()});
}

void MoeLayer::layout_workspace(Carver& c, const LayerContext& ctx, const MoeSpec& spec,
                                std::int64_t rows, BlockWorkspace& ws) {
  const DType dt = ctx.dtype;
  // The router's tensors hold every row of the micro-batch (`rows` of this context-parallel
  // rank's share, times cp), the rest this rank's own rows (under sequence parallelism 1/tp of
  // them): those routed, and under expert parallelism those this rank's experts may receive.
  const std::int64_t own = ctx.tp.local_rows(rows), all = rows * ctx.cp.size();
  const std::int64_t routed = own * spec.top_k, received = own * spec.received_row_factor();
  const std::int64_t hs = spec.shared_hidden;
  ws.moe_logits = c.take(dt, {all, spec.experts});
  ws.moe_d_logits = c.take(dt, {all, spec.experts});
  ws.moe_counts = c.take(DType::i32, {spec.experts});
  ws.moe_d_rows = c.take(dt, {routed, spec.d});
  ws.moe_d_act = c.take(dt, {received, spec.hidden});
  ws.moe_d_up = c.take(dt, {received, spec.hidden});
  ws.moe_d_gates = c.take(ctx.statistics(), {all, spec.top_k});
  if (rows_split(ctx)) {
    ws.moe_order_all = c.take(DType::i32, {all * spec.top_k});
    ws.moe_position_all = c.take(DType::i32, {all * spec.top_k});
    ws.moe_d_gates_local = c.take(ctx.statistics(), {own, spec.top_k});
  }
  if (ctx.tp.sequence_parallel() && ctx.cp.active()) {
    // Gathered over tp (this cp rank's rows), then over cp.
    ws.moe_logits_cp = c.take(dt, {rows, spec.experts});
    ws.moe_d_gates_cp = c.take(ctx.statistics(), {rows, spec.top_k});
  }
  if (spec.expert_ranks > 1) {
    ws.moe_recv_counts = c.take(DType::i32, {spec.experts});
    ws.moe_recv = c.take(dt, {received, spec.d});
    ws.moe_yr = c.take(dt, {received, spec.d});
    ws.moe_perm = c.take(DType::i32, {received});
    ws.moe_inverse = c.take(DType::i32, {received});
  }
  if (hs == 0) return;
  ws.shared_d_out = c.take(dt, {own, spec.d});
  ws.shared_d_act = c.take(dt, {own, hs});
  ws.shared_d_up = c.take(dt, {own, hs});
  ws.shared_d_logit = c.take(dt, {own, 1});
}

void MoeLayer::linear(int w, const Tensor& in, const Tensor& out) const {
  ctx_.backend.linear_forward(in, ctx_.params.param(w), nullptr, out);
}

void MoeLayer::expert_linear(int w, const Tensor& in, const Tensor& out) const {
  ctx_.backend.linear_forward(in, expert_store().param(w), nullptr, out);
}

void MoeLayer::linear_backward_in(ParamStore& p, int w, const Tensor& dy, const Tensor& in,
                                  const Tensor* dx, bool accumulate_dx) const {
  const bool acc = p.accumulate_grad(w);
  // An expert no row of the micro-batch chose: a zero gradient, written or added as nothing.
  if (dy.numel() == 0) {
    if (!acc) ctx_.backend.zero(p.grad(w));
    return;
  }
  if (dx) ctx_.backend.linear_backward_input(dy, p.param(w), *dx, accumulate_dx);
  ctx_.backend.linear_backward_weight(dy, in, p.grad(w), nullptr, acc);
}

void MoeLayer::linear_backward(int w, const Tensor& dy, const Tensor& in, const Tensor* dx,
                               bool accumulate_dx) const {
  linear_backward_in(ctx_.params, w, dy, in, dx, accumulate_dx);
}

void MoeLayer::expert_linear_backward(int w, const Tensor& dy, const Tensor& in, const Tensor* dx,
                                      bool accumulate_dx) const {
  linear_backward_in(expert_store(), w, dy, in, dx, accumulate_dx);
}

std::vector<char> MoeLayer::drop_past_capacity(const BlockActivations& s,
                                               const Tensor& position_all,
                                               const std::vector<std::int64_t>& counts) {
  const std::int64_t n = s.moe_gates.shape[0], k = spec_.top_k;
  MoeConfig moe{.experts = spec_.experts, .top_k = k, .capacity_factor = spec_.capacity_factor};
  const std::int64_t capacity = moe.capacity(n);
  if (capacity <= 0) return {};
  bool any = false;
  for (std::int64_t c : counts) any |= c > capacity;
  if (!any) return {};
  // The dispatch order is by expert, then token row, then choice: a choice's place in its
  // expert's group is its position minus the rows of the experts before.
  std::vector<std::int32_t> position(static_cast<std::size_t>(n * k)), experts(position.size());
  copy_to_host(position_all, position.data());
  copy_to_host(s.moe_experts, experts.data());
  std::vector<std::int64_t> first(counts.size(), 0);
  for (std::size_t e = 1; e < counts.size(); ++e) first[e] = first[e - 1] + counts[e - 1];
  std::vector<float> gates = read_values(s.moe_gates);
  std::vector<char> dropped(position.size(), 0);
  for (std::size_t c = 0; c < position.size(); ++c) {
    const auto e = static_cast<std::size_t>(experts[c]);
    if (position[c] - first[e] >= capacity) {
      gates[c] = 0;
      dropped[c] = 1;
    }
  }
  if (s.moe_gates.dtype == DType::f64) {
    // f64 checks: keep the gates' other bits (read_values rounds to f32).
    std::vector<double> exact(position.size());
    copy_to_host(s.moe_gates, exact.data());
    for (std::size_t c = 0; c < exact.size(); ++c)
      if (dropped[c]) exact[c] = 0;
    copy_from_host(exact.data(), s.moe_gates);
  } else {
    write_values(gates.data(), s.moe_gates);
  }
  return dropped;
}

std::int64_t MoeLayer::skip_dropped(const BlockActivations& s, const BlockWorkspace& ws,
                                    const char* dropped, std::vector<std::int64_t>& counts) const {
  const auto m = static_cast<std::size_t>(s.moe_order.numel());
  std::vector<std::int32_t> order(m), kept, tail;
  copy_to_host(s.moe_order, order.data());
  kept.reserve(m);
  std::size_t at = 0;
  for (std::int64_t& count : counts) {
    std::int64_t keep = 0;
    for (std::int64_t r = 0; r < count; ++r, ++at) {
      const std::int32_t c = order[at];
      if (dropped[c]) {
        tail.push_back(c);
      } else {
        kept.push_back(c);
        ++keep;
      }
    }
    count = keep;
  }
  const auto rows = static_cast<std::int64_t>(kept.size());
  kept.insert(kept.end(), tail.begin(), tail.end());
  std::vector<std::int32_t> position(m);
  for (std::size_t p = 0; p < m; ++p) position[static_cast<std::size_t>(kept[p])] = static_cast<std::int32_t>(p);
  copy_from_host(kept.data(), s.moe_order);
  copy_from_host(position.data(), s.moe_position);
  // The kept counts, which expert parallelism's exchange sends its peers.
  const std::vector<std::int32_t> kept_counts(counts.begin(), counts.end());
  copy_from_host(kept_counts.data(), ws.moe_counts);
  return rows;
}

std::vector<std::int64_t> MoeLayer::elements(const std::vector<std::int64_t>& rows) const {
  std::vector<std::int64_t> out;
  for (std::int64_t r : rows) out.push_back(r * spec_.d);
  return out;
}

MoeLayer::Exchange MoeLayer::plan_exchange(const std::vector<std::int64_t>& counts,
                                           const BlockWorkspace& ws) {
  Communicator& ep = *ctx_.ep;
  const auto P = static_cast<std::size_t>(ep.size());
  const std::size_t local = counts.size() / P;
  // Block j of the counts (experts [j E/P, (j+1) E/P)) goes to ep rank j; block s of what
  // arrives is how many rows source s routes to each of this rank's experts.
  ep.all_to_all(ws.moe_counts, ws.moe_recv_counts);
  std::vector<std::int32_t> by_source(counts.size());
  copy_to_host(ws.moe_recv_counts, by_source.data());
  Exchange x;
  x.send_rows.assign(P, 0);
  x.recv_rows.assign(P, 0);
  x.expert_rows.assign(local, 0);
  for (std::size_t j = 0; j < P; ++j)
    for (std::size_t l = 0; l < local; ++l) {
      x.send_rows[j] += counts[j * local + l];
      x.recv_rows[j] += by_source[j * local + l];
      x.expert_rows[l] += by_source[j * local + l];
    }
  // Received rows are by source, then expert; the experts run them by expert, then source
  // (each source's rows in its token order): row i of that order is received row perm[i].
  std::vector<std::int64_t> source_first(P, 0);
  for (std::size_t j = 1; j < P; ++j) source_first[j] = source_first[j - 1] + x.recv_rows[j - 1];
  for (std::size_t l = 0; l < local; ++l)
    for (std::size_t j = 0; j < P; ++j) {
      std::int64_t at = source_first[j];
      for (std::size_t m = 0; m < l; ++m) at += by_source[j * local + m];
      for (std::int32_t r = 0; r < by_source[j * local + l]; ++r)
        x.perm.push_back(static_cast<std::int32_t>(at + r));
    }
  x.received = static_cast<std::int64_t>(x.perm.size());
  x.inverse.assign(x.perm.size(), 0);
  for (std::size_t i = 0; i < x.perm.size(); ++i)
    x.inverse[static_cast<std::size_t>(x.perm[i])] = static_cast<std::int32_t>(i);
  return x;
}

void MoeLayer::upload_permutation(const Exchange& x, const BlockWorkspace& ws) const {
  if (x.received == 0) return;
  copy_from_host(x.perm.data(), ws.moe_perm.rows(0, x.received));
  copy_from_host(x.inverse.data(), ws.moe_inverse.rows(0, x.received));
}

void MoeLayer::experts_forward(const BlockActivations& s, const Tensor& in, const Tensor& out,
                               const std::vector<std::int64_t>& rows) {
  Backend& be = ctx_.backend;
  std::int64_t total = 0;
  for (std::int64_t r : rows) total += r;
  // Each expert's SwiGLU on its rows: one GEMM per layer and expert (a grouped GEMM).
  std::int64_t first = 0;
  for (std::size_t e = 0; e < rows.size(); first += rows[e], ++e) {
    if (rows[e] == 0) continue;
    const Tensor x = in.rows(first, rows[e]);
    expert_linear(w1_[e], x, s.moe_gate.rows(first, rows[e]));
    expert_linear(w3_[e], x, s.moe_up.rows(first, rows[e]));
  }
  if (total > 0)
    be.swiglu_forward(s.moe_gate.rows(0, total), s.moe_up.rows(0, total),
                      s.moe_act.rows(0, total));
  first = 0;
  for (std::size_t e = 0; e < rows.size(); first += rows[e], ++e)
    if (rows[e] > 0)
      expert_linear(w2_[e], s.moe_act.rows(first, rows[e]), out.rows(first, rows[e]));
}

void MoeLayer::experts_backward(const BlockActivations& s, const Tensor& in, const Tensor& d_out,
                                const Tensor& d_in, const BlockWorkspace& ws,
                                const std::vector<std::int64_t>& rows) {
  Backend& be = ctx_.backend;
  auto part = [&](const Tensor& t, std::int64_t first, std::size_t e) {
    return t.rows(first, rows[e]);
  };
  std::int64_t total = 0;
  for (std::int64_t r : rows) total += r;
  std::int64_t first = 0;
  for (std::size_t e = 0; e < rows.size(); first += rows[e], ++e) {
    const Tensor d_act = part(ws.moe_d_act, first, e);
    expert_linear_backward(w2_[e], part(d_out, first, e), part(s.moe_act, first, e), &d_act,
                           false);
  }
  if (total > 0) {
    const Tensor d_act = ws.moe_d_act.rows(0, total);
    be.swiglu_backward(s.moe_gate.rows(0, total), s.moe_up.rows(0, total), d_act, d_act,
                       ws.moe_d_up.rows(0, total));
  }
  first = 0;
  for (std::size_t e = 0; e < rows.size(); first += rows[e], ++e) {
    const Tensor x = part(in, first, e), dx = part(d_in, first, e);
    expert_linear_backward(w1_[e], part(ws.moe_d_act, first, e), x, &dx, false);
    expert_linear_backward(w3_[e], part(ws.moe_d_up, first, e), x, &dx, true);
  }
}

void MoeLayer::forward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& y,
                       const BlockWorkspace& ws, bool record) {
  Backend& be = ctx_.backend;
  // Under context parallelism every cp rank routes the whole micro-batch: one of them counts
  // its losses and loads (the step's stats are summed over the dp x cp ranks).
  record = record && ctx_.cp.rank() == 0;
  const Tensor losses = losses_.view(DType::f64, Shape{2}, record ? 0 : 2 * sizeof(double));
  const bool split = rows_split(ctx_);
  if (!split) {
    linear(router_, x, ws.moe_logits);
  } else {
    // Every rank routes the whole micro-batch (its logits gathered, each rank's rows in turn).
    const Tensor own = ws.moe_d_logits.rows(0, x.shape[0]);
    linear(router_, x, own);
    gather_rows(own, ws.moe_logits, ws.moe_logits_cp);
  }
  const Tensor bias = has_router_bias() ? router_bias_.view(DType::f32, Shape{spec_.experts})
                                        : Tensor{};
  be.moe_route(ws.moe_logits, routing(), has_router_bias() ? &bias : nullptr, s.moe_probs,
               s.moe_lse, s.moe_experts, s.moe_gates, losses);
  // The whole micro-batch's dispatch: its loads and its capacity (the serial run's).
  const Tensor position_all = split ? ws.moe_position_all : s.moe_position;
  be.moe_dispatch(s.moe_experts, split ? ws.moe_order_all : s.moe_order, position_all,
                  ws.moe_counts);
  const std::vector<std::int64_t> all = read_counts(ws);
  const std::vector<char> dropped = drop_past_capacity(s, position_all, all);
  if (record) {
    ++micro_batches_;
    for (char d : dropped) dropped_ += d;
    for (std::size_t e = 0; e < all.size(); ++e) expert_rows_[e] += all[e];
  }
  // This rank's rows, dispatched alone under sequence parallelism.
  if (static_cast<std::size_t>(slot) >= counts_.size()) counts_.resize(slot + 1);
  std::vector<std::int64_t>& counts = counts_[static_cast<std::size_t>(slot)];
  if (split) {
    be.moe_dispatch(own_rows(s.moe_experts, x), s.moe_order, s.moe_position, ws.moe_counts);
    counts = read_counts(ws);
  } else {
    counts = all;
  }
  // Capacity factor: the dropped choices move behind every expert's rows, which run without
  // them; their outputs are zeros (below) that their zero gates multiply.
  const std::int64_t routed = s.moe_order.numel();
  const std::int64_t kept =
      dropped.empty() ? routed
                      : skip_dropped(s, ws, dropped.data() + own_first(x) * spec_.top_k, counts);
  be.moe_gather(x, s.moe_order, s.moe_xp);
  if (!ctx_.ep) {
    experts_forward(s, s.moe_xp, s.moe_yp, counts);
  } else {
    // Expert parallelism: rows to their experts' ranks, through this rank's experts, back.
    if (static_cast<std::size_t>(slot) >= exchanges_.size()) exchanges_.resize(slot + 1);
    Exchange& ex = exchanges_[static_cast<std::size_t>(slot)] = plan_exchange(counts, ws);
    const std::vector<std::int64_t> send = elements(ex.send_rows), recv = elements(ex.recv_rows);
    if (record) {
      const auto me = static_cast<std::size_t>(ctx_.ep->rank());
      for (std::size_t j = 0; j < send.size(); ++j)
        if (j != me) {
          rows_sent_ += ex.send_rows[j];
          rows_received_ += ex.recv_rows[j];
        }
    }
    const std::int64_t r = ex.received;
    ctx_.ep->all_to_all_v(s.moe_xp, send, ws.moe_recv, recv);
    upload_permutation(ex, ws);
    if (r > 0) be.moe_gather(ws.moe_recv.rows(0, r), ws.moe_perm.rows(0, r), s.moe_xr.rows(0, r));
    experts_forward(s, s.moe_xr, ws.moe_yr, ex.expert_rows);
    if (r > 0) be.moe_gather(ws.moe_yr.rows(0, r), ws.moe_inverse.rows(0, r), ws.moe_recv.rows(0, r));
    ctx_.ep->all_to_all_v(ws.moe_recv, recv, s.moe_yp, send);
  }
  if (kept < routed) be.zero(s.moe_yp.rows(kept, routed - kept));
  const Tensor gates = own_rows(s.moe_gates, x);
  be.moe_combine(s.moe_yp, s.moe_position, &gates, y, false);
  if (shared_gate_ < 0) return;
  linear(shared_gate_, x, s.shared_gate);
  linear(shared_up_, x, s.shared_up);
  be.swiglu_forward(s.shared_gate, s.shared_up, s.shared_act);
  linear(shared_down_, s.shared_act, s.shared_out);
  linear(shared_router_, x, s.shared_logit);
  be.moe_shared_gate(s.shared_logit, s.shared_out, y);
}

void MoeLayer::forward_rows(int slot, const BlockActivations& s, const Tensor& x,
                            const Tensor& y, const BlockWorkspace& ws, std::int64_t first,
                            std::int64_t count) {
  if (spec_.capacity_factor > 0 || ctx_.ep)
    fail("generation with a key/value cache runs a mixture of experts dropless on one rank: "
         "model.moe_capacity_factor = {} and --ep are training's (docs/moe.md)",
         spec_.capacity_factor);
  // The per-row tensors at the rows' own places; the routed rows and the dispatch from their
  // start (they index this call's count x top_k choices only).
  const std::int64_t routed = count * spec_.top_k;
  BlockActivations v = s;
  for (Tensor BlockActivations::*t :
       {&BlockActivations::moe_probs, &BlockActivations::moe_lse, &BlockActivations::moe_experts,
        &BlockActivations::moe_gates})
    v.*t = (s.*t).rows(first, count);
  v.moe_order = s.moe_order.rows(0, count);
  v.moe_position = s.moe_position.rows(0, count);
  for (Tensor BlockActivations::*t :
       {&BlockActivations::moe_xp, &BlockActivations::moe_yp, &BlockActivations::moe_gate,
        &BlockActivations::moe_up, &BlockActivations::moe_act})
    v.*t = (s.*t).rows(0, routed);
  if (shared_gate_ >= 0)
    for (Tensor BlockActivations::*t :
         {&BlockActivations::shared_gate, &BlockActivations::shared_up,
          &BlockActivations::shared_act, &BlockActivations::shared_out,
          &BlockActivations::shared_logit})
      v.*t = (s.*t).rows(first, count);
  BlockWorkspace w = ws;
  w.moe_logits = ws.moe_logits.rows(0, count);
  forward(slot, v, x, y, w, false);
}

Tensor MoeLayer::backward(int slot, const BlockActivations& s, const Tensor& x, const Tensor& dy,
                          const BlockWorkspace& ws) {
  Backend& be = ctx_.backend;
  const std::vector<std::int64_t>& counts = counts_[static_cast<std::size_t>(slot)];
  const Tensor dx = ws.d_norm;
  const bool split = rows_split(ctx_);
  // Through the combine: the routed outputs' gradient (in moe_d_rows) and this rank's rows'
  // gates'.
  const Tensor own_gates = own_rows(s.moe_gates, x);
  const Tensor own_d_gates = split ? ws.moe_d_gates_local : ws.moe_d_gates;
  be.moe_combine_backward(dy, s.moe_yp, s.moe_order, s.moe_position, own_gates, ws.moe_d_rows,
                          own_d_gates);
  if (spec_.capacity_factor > 0) {
    // A dropped choice (gate zero) adds nothing to y: its gate gets no gradient either.
    const std::vector<float> gates = read_values(own_gates);
    std::vector<float> d_gates = read_values(own_d_gates);
    bool any = false;
    for (std::size_t c = 0; c < gates.size(); ++c)
      if (gates[c] == 0.0f) {
        d_gates[c] = 0;
        any = true;
      }
    if (any) write_values(d_gates.data(), own_d_gates);
  }
  if (!ctx_.ep) {
    // The routed inputs' gradient replaces the outputs' in moe_d_rows (all read by then).
    experts_backward(s, s.moe_xp, ws.moe_d_rows, ws.moe_d_rows, ws, counts);
  } else {
    // The outputs' gradients to the experts' ranks (in by-expert order), the inputs' back.
    const Exchange& ex = exchanges_[static_cast<std::size_t>(slot)];
    const std::vector<std::int64_t> send = elements(ex.send_rows), recv = elements(ex.recv_rows);
    const std::int64_t r = ex.received;
    ctx_.ep->all_to_all_v(ws.moe_d_rows, send, ws.moe_recv, recv);
    upload_permutation(ex, ws);
    if (r > 0) be.moe_gather(ws.moe_recv.rows(0, r), ws.moe_perm.rows(0, r), ws.moe_yr.rows(0, r));
    experts_backward(s, s.moe_xr, ws.moe_yr, ws.moe_yr, ws, ex.expert_rows);
    if (r > 0) be.moe_gather(ws.moe_yr.rows(0, r), ws.moe_inverse.rows(0, r), ws.moe_recv.rows(0, r));
    ctx_.ep->all_to_all_v(ws.moe_recv, recv, ws.moe_d_rows, send);
  }
  be.moe_combine(ws.moe_d_rows, s.moe_position, nullptr, dx, false);
  // The router: the gates' gradient, the load-balancing and z losses' (each micro-batch's
  // losses weigh its N rows of the step's tokens, as grad_scale does the token losses). Under
  // sequence parallelism every tp rank takes the whole micro-batch's (the gates' gradient
  // gathered) and keeps its own rows' part for the router's weight and x.
  if (split) gather_rows(own_d_gates, ws.moe_d_gates, ws.moe_d_gates_cp);
  const double rows_scale = static_cast<double>(s.moe_probs.shape[0]) * grad_scale_;
  be.moe_route_backward(s.moe_probs, s.moe_lse, s.moe_experts, s.moe_gates, ws.moe_d_gates,
                        routing(), weights_.aux * rows_scale, weights_.z * rows_scale,
                        ws.moe_d_logits);
  linear_backward(router_, own_rows(ws.moe_d_logits, x), x, &dx, true);
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

bool MoeLayer::rows_split(const LayerContext& ctx) {
  return ctx.tp.sequence_parallel() || ctx.cp.active();
}

std::int64_t MoeLayer::own_first(const Tensor& x) const {
  // Every cp rank's rows in turn, each its tp ranks' in turn under sequence parallelism.
  const bool sp = ctx_.tp.sequence_parallel();
  const std::int64_t tp_ranks = sp ? ctx_.tp.size() : 1, tp_rank = sp ? ctx_.tp.rank() : 0;
  return x.shape[0] * (ctx_.cp.rank() * tp_ranks + tp_rank);
}

Tensor MoeLayer::own_rows(const Tensor& all, const Tensor& x) const {
  return rows_split(ctx_) ? all.rows(own_first(x), x.shape[0]) : all;
}

void MoeLayer::gather_rows(const Tensor& own, const Tensor& all, const Tensor& cp_rows) const {
  const bool sp = ctx_.tp.sequence_parallel(), cp = ctx_.cp.active();
  if (sp && cp) {
    ctx_.tp.group()->all_gather(own, cp_rows);
    ctx_.cp.group()->all_gather(cp_rows, all);
  } else {
    (sp ? ctx_.tp.group() : ctx_.cp.group())->all_gather(own, all);
  }
}

std::vector<std::int64_t> MoeLayer::read_counts(const BlockWorkspace& ws) const {
  std::vector<std::int32_t> host(static_cast<std::size_t>(spec_.experts));
  copy_to_host(ws.moe_counts, host.data());
  return {host.begin(), host.end()};
}

MoeStats MoeLayer::stats() const {
  std::array<double, 2> sums{};
  copy_to_host(losses_.view(DType::f64, Shape{2}), sums.data());
  return {.aux_sum = sums[0], .z_sum = sums[1], .micro_batches = micro_batches_,
          .expert_rows = expert_rows_, .dropped = dropped_, .rows_sent = rows_sent_,
          .rows_received = rows_received_};
}

void MoeLayer::reset_stats() {
  ctx_.backend.zero(losses_.view(DType::f64, Shape{4}));
  micro_batches_ = 0;
  dropped_ = rows_sent_ = rows_received_ = 0;
  expert_rows_.assign(static_cast<std::size_t>(spec_.experts), 0);
}

}  // namespace kintsugi
