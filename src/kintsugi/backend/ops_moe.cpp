// The mixture-of-experts ops' entry points (backend.hpp): the router, the permutation by expert
// and its inverse weighted by the gates, and the shared expert's gate. Each checks the shapes of
// its contract and counts its bytes once (no FLOPs: like the elementwise ops, they are not in the
// model FLOPs of plan/flops.hpp), then runs the device backend's implementation.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
bool index(const Tensor& t) { return t.dtype == DType::i32; }
}  // namespace

void Backend::moe_route(const Tensor& logits, const MoeRouting& routing, const Tensor* bias,
                        const Tensor& probs, const Tensor& lse, const Tensor& experts,
                        const Tensor& gates, const Tensor& losses) {
  const std::int64_t n = rows(logits), e = cols(logits), top_k = routing.top_k;
  KINTSUGI_ASSERT(top_k >= 1 && top_k <= e);
  KINTSUGI_ASSERT(routing.groups >= 1 && e % routing.groups == 0 && routing.topk_groups >= 1 &&
                  routing.topk_groups <= routing.groups &&
                  top_k <= routing.topk_groups * (e / routing.groups) && routing.scale > 0);
  KINTSUGI_ASSERT(!bias || (bias->dtype == DType::f32 && bias->numel() == e));
  KINTSUGI_ASSERT(probs.numel() == n * e && lse.numel() == n);
  KINTSUGI_ASSERT(index(experts) && experts.numel() == n * top_k && gates.numel() == n * top_k);
  KINTSUGI_ASSERT(losses.dtype == DType::f64 && losses.numel() == 2);
  const double moved = bytes(logits) + bytes(probs) + bytes(lse) + bytes(experts) + bytes(gates);
  dispatch(op_call("moe_route", 0, moved, logits), [&] {
    device_.do_moe_route(logits, routing, bias, probs, lse, experts, gates, losses);
  });
}

void Backend::moe_route_backward(const Tensor& probs, const Tensor& lse, const Tensor& experts,
                                 const Tensor& gates, const Tensor& d_gates,
                                 const MoeRouting& routing, double aux_scale, double z_scale,
                                 const Tensor& d_logits) {
  const std::int64_t n = rows(probs), e = cols(probs), k = cols(experts);
  KINTSUGI_ASSERT(lse.numel() == n && index(experts) && experts.numel() == n * k);
  KINTSUGI_ASSERT(gates.numel() == n * k && d_gates.numel() == n * k);
  KINTSUGI_ASSERT(d_logits.numel() == n * e);
  const double moved = bytes(probs) + bytes(lse) + bytes(experts) + bytes(gates) +
                       bytes(d_gates) + bytes(d_logits);
  dispatch(op_call("moe_route_backward", 0, moved, probs), [&] {
    device_.do_moe_route_backward(probs, lse, experts, gates, d_gates, routing, aux_scale,
                                  z_scale, d_logits);
  });
}

void Backend::moe_dispatch(const Tensor& experts, const Tensor& order, const Tensor& position,
                           const Tensor& counts) {
  const std::int64_t m = experts.numel();
  KINTSUGI_ASSERT(index(experts) && index(order) && index(position) && index(counts));
  KINTSUGI_ASSERT(order.numel() == m && position.numel() == m && counts.numel() >= 1);
  const double moved = bytes(experts) + bytes(order) + bytes(position) + bytes(counts);
  dispatch(op_call("moe_dispatch", 0, moved, experts),
           [&] { device_.do_moe_dispatch(experts, order, position, counts); });
}

void Backend::moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp) {
  const std::int64_t m = rows(xp);
  KINTSUGI_ASSERT(index(order) && order.numel() == m && cols(x) == cols(xp));
  KINTSUGI_ASSERT(rows(x) >= 1 && m % rows(x) == 0 && x.dtype == xp.dtype);
  dispatch(op_call("moe_gather", 0, 2 * bytes(xp) + bytes(order), xp),
           [&] { device_.do_moe_gather(x, order, xp); });
}

void Backend::moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                          const Tensor& out, bool accumulate) {
  const std::int64_t n = rows(out), m = rows(src);
  KINTSUGI_ASSERT(cols(src) == cols(out) && n >= 1 && m % n == 0);
  KINTSUGI_ASSERT(index(position) && position.numel() == m);
  KINTSUGI_ASSERT(!weights || weights->numel() == m);
  const double moved = bytes(src) + bytes(position) + bytes(weights) +
                       (accumulate ? 2.0 : 1.0) * bytes(out);
  dispatch(op_call("moe_combine", 0, moved, src),
           [&] { device_.do_moe_combine(src, position, weights, out, accumulate); });
}

void Backend::moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                                   const Tensor& position, const Tensor& weights,
                                   const Tensor& d_src, const Tensor& d_weights) {
  const std::int64_t n = rows(dy), m = rows(src);
  KINTSUGI_ASSERT(cols(src) == cols(dy) && n >= 1 && m % n == 0);
  KINTSUGI_ASSERT(index(order) && index(position) && order.numel() == m && position.numel() == m);
  KINTSUGI_ASSERT(weights.numel() == m && d_weights.numel() == m && d_src.numel() == src.numel());
  const double moved = 2.0 * bytes(dy) + bytes(src) + bytes(order) + bytes(position) +
                       bytes(weights) + bytes(d_src) + bytes(d_weights);
  dispatch(op_call("moe_combine_backward", 0, moved, src),
           [&] {
             device_.do_moe_combine_backward(dy, src, order, position, weights, d_src, d_weights);
           });
}

void Backend::moe_shared_gate(const Tensor& logit, const Tensor& shared, const Tensor& out) {
  const std::int64_t n = rows(out);
  KINTSUGI_ASSERT(logit.numel() == n && shared.numel() == out.numel());
  dispatch(op_call("moe_shared_gate", 0,
                   bytes(logit) + bytes(shared) + 2.0 * bytes(out), out),
           [&] { device_.do_moe_shared_gate(logit, shared, out); });
}

void Backend::moe_shared_gate_backward(const Tensor& logit, const Tensor& shared,
                                       const Tensor& dy, const Tensor& d_shared,
                                       const Tensor& d_logit) {
  const std::int64_t n = rows(dy);
  KINTSUGI_ASSERT(logit.numel() == n && d_logit.numel() == n);
  KINTSUGI_ASSERT(shared.numel() == dy.numel() && d_shared.numel() == dy.numel());
  const double moved =
      2.0 * bytes(logit) + bytes(shared) + bytes(dy) + bytes(d_shared);
  dispatch(op_call("moe_shared_gate_backward", 0, moved, dy),
           [&] { device_.do_moe_shared_gate_backward(logit, shared, dy, d_shared, d_logit); });
}

}  // namespace kintsugi
