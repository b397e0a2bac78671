// The normalization ops' entry points (backend.hpp): LayerNorm and RMSNorm check their shapes and
// count their bytes once, then run the device backend's implementation.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

void Backend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                double eps) {
  KINTSUGI_ASSERT(w.numel() == cols(x) && b.numel() == cols(x) && mean.numel() == rows(x) &&
                  rstd.numel() == rows(x) && y.numel() == x.numel());
  const double moved = bytes(x) + bytes(w) + bytes(b) + bytes(y) + bytes(mean) + bytes(rstd);
  dispatch(op_call("layernorm_forward", 0, moved, x),
           [&] { device_.do_layernorm_forward(x, w, b, y, mean, rstd, eps); });
}

void Backend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                 const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                 const Tensor& dw, const Tensor& db, bool accumulate) {
  const std::int64_t n = rows(x), c = cols(x);
  KINTSUGI_ASSERT(w.numel() == c && dw.numel() == c && db.numel() == c && mean.numel() == n &&
                  rstd.numel() == n && dy.numel() == x.numel() && dx.numel() == x.numel());
  // dx always accumulates (backend.hpp): read and written.
  const double moved = bytes(dy) + bytes(x) + bytes(w) + bytes(mean) + bytes(rstd) +
                       2 * bytes(dx) + (bytes(dw) + bytes(db)) * (accumulate ? 2 : 1);
  dispatch(op_call("layernorm_backward", 0, moved, x),
           [&] { device_.do_layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, accumulate); });
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                              const Tensor& rstd, double eps) {
  KINTSUGI_ASSERT(w.numel() == cols(x) && rstd.numel() == rows(x) && y.numel() == x.numel());
  const double moved = bytes(x) + bytes(w) + bytes(y) + bytes(rstd);
  dispatch(op_call("rmsnorm_forward", 0, moved, x),
           [&] { device_.do_rmsnorm_forward(x, w, y, rstd, eps); });
}

void Backend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                               bool accumulate) {
  KINTSUGI_ASSERT(w.numel() == cols(x) && rstd.numel() == rows(x) && dy.numel() == x.numel() &&
                  dx.numel() == x.numel() && dw.numel() == w.numel());
  const double moved = bytes(dy) + bytes(x) + bytes(w) + bytes(rstd) + 2 * bytes(dx) +
                       bytes(dw) * (accumulate ? 2 : 1);
  dispatch(op_call("rmsnorm_backward", 0, moved, x),
           [&] { device_.do_rmsnorm_backward(dy, x, w, rstd, dx, dw, accumulate); });
}

}  // namespace kintsugi
