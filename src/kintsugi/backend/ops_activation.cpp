// The activations' entry points (backend.hpp): SwiGLU and GELU check their shapes and count their
// bytes once, then run the device backend's implementation.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

void Backend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  KINTSUGI_ASSERT(gate.numel() == up.numel() && gate.numel() == y.numel());
  dispatch(op_call("swiglu_forward", 0, bytes(gate) + bytes(up) + bytes(y), gate),
           [&] { device_.do_swiglu_forward(gate, up, y); });
}

void Backend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                              const Tensor& dgate, const Tensor& dup) {
  const std::int64_t n = gate.numel();
  KINTSUGI_ASSERT(up.numel() == n && dy.numel() == n && dgate.numel() == n && dup.numel() == n);
  const double moved = bytes(gate) + bytes(up) + bytes(dy) + bytes(dgate) + bytes(dup);
  dispatch(op_call("swiglu_backward", 0, moved, gate),
           [&] { device_.do_swiglu_backward(gate, up, dy, dgate, dup); });
}

void Backend::gelu_forward(const Tensor& x, const Tensor& y) {
  KINTSUGI_ASSERT(x.numel() == y.numel());
  dispatch(op_call("gelu_forward", 0, bytes(x) + bytes(y), x),
           [&] { device_.do_gelu_forward(x, y); });
}

void Backend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  KINTSUGI_ASSERT(x.numel() == dy.numel() && x.numel() == dx.numel());
  dispatch(op_call("gelu_backward", 0, bytes(x) + bytes(dy) + bytes(dx), x),
           [&] { device_.do_gelu_backward(x, dy, dx); });
}

}  // namespace kintsugi
