// The dense algebra ops' entry points (backend.hpp): each checks its shapes and counts its FLOPs
// and bytes once, then runs the device backend's implementation.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                             const Tensor& y, bool accumulate) {
  const std::int64_t m = rows(x), n = w.shape[0], k = cols(x);
  KINTSUGI_ASSERT(w.shape[1] == k && rows(y) == m && cols(y) == n);
  KINTSUGI_ASSERT(!bias || bias->numel() == n);
  const double moved = bytes(x) + bytes(w) + bytes(bias) + bytes(y) * (accumulate ? 2 : 1);
  dispatch(OpCall{"linear_forward", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
           [&] { device_.do_linear_forward(x, w, bias, y, accumulate); });
}

void Backend::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                    bool accumulate) {
  const std::int64_t m = rows(dy), n = cols(dy), k = w.shape[1];
  KINTSUGI_ASSERT(w.shape[0] == n && rows(dx) == m && cols(dx) == k);
  const double moved = bytes(dy) + bytes(w) + bytes(dx) * (accumulate ? 2 : 1);
  dispatch(OpCall{"linear_backward_input", 2.0 * m * n * k, moved, Shape{m, n, k}, dy.dtype},
           [&] { device_.do_linear_backward_input(dy, w, dx, accumulate); });
}

void Backend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                     const Tensor* db, bool accumulate) {
  const std::int64_t m = rows(dy), n = cols(dy), k = cols(x);
  KINTSUGI_ASSERT(rows(x) == m && dw.shape[0] == n && dw.shape[1] == k);
  KINTSUGI_ASSERT(!db || db->numel() == n);
  const double moved = bytes(dy) + bytes(x) + (bytes(dw) + bytes(db)) * (accumulate ? 2 : 1);
  dispatch(OpCall{"linear_backward_weight", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
           [&] { device_.do_linear_backward_weight(dy, x, dw, db, accumulate); });
}

// The GELU MLP's fused ops: what a fused GEMM moves (the GELU's input written or read besides
// the product's operands and result).
void Backend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                  const Tensor& pre, const Tensor& y) {
  const std::int64_t m = rows(x), n = w.shape[0], k = cols(x);
  KINTSUGI_ASSERT(w.shape[1] == k && rows(y) == m && cols(y) == n);
  KINTSUGI_ASSERT(pre.numel() == y.numel() && pre.data != y.data);
  KINTSUGI_ASSERT(!bias || bias->numel() == n);
  const double moved = bytes(x) + bytes(w) + bytes(bias) + bytes(pre) + bytes(y);
  dispatch(OpCall{"linear_gelu_forward", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
           [&] { device_.do_linear_gelu_forward(x, w, bias, pre, y); });
}

void Backend::linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                         const Tensor& dx) {
  const std::int64_t m = rows(dy), n = cols(dy), k = w.shape[1];
  KINTSUGI_ASSERT(w.shape[0] == n && rows(dx) == m && cols(dx) == k);
  KINTSUGI_ASSERT(pre.numel() == dx.numel() && pre.data != dx.data);
  const double moved = bytes(dy) + bytes(w) + bytes(pre) + bytes(dx);
  dispatch(
      OpCall{"linear_backward_input_gelu", 2.0 * m * n * k, moved, Shape{m, n, k}, dy.dtype},
      [&] { device_.do_linear_backward_input_gelu(dy, w, pre, dx); });
}

}  // namespace kintsugi
