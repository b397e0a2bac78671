#include "kintsugi/backend/cpu/linear_gelu.hpp"

namespace kintsugi::cpu {

void linear_gelu_forward(Backend& be, const Tensor& x, const Tensor& w, const Tensor* bias,
                         const Tensor& pre, const Tensor& y) {
  KINTSUGI_ASSERT(pre.numel() == y.numel() && pre.data != y.data);
  be.linear_forward(x, w, bias, pre);
  be.gelu_forward(pre, y);
}

void linear_backward_input_gelu(Backend& be, const Tensor& dy, const Tensor& w, const Tensor& pre,
                                const Tensor& dx) {
  KINTSUGI_ASSERT(pre.numel() == dx.numel() && pre.data != dx.data);
  be.linear_backward_input(dy, w, dx, false);
  be.gelu_backward(pre, dx, dx);  // in place: gelu_backward lets dx alias dy
}

}  // namespace kintsugi::cpu
