#pragma once
// The MLP's GEMMs with GELU (Backend::linear_gelu_forward, linear_backward_input_gelu) on the
// CPU: the unfused ops in sequence, so that the CPU stays the oracle the fused GPU epilogues are
// checked against and computes exactly what the separate ops computed.
#include "kintsugi/backend/backend.hpp"

namespace kintsugi::cpu {

void linear_gelu_forward(Backend& be, const Tensor& x, const Tensor& w, const Tensor* bias,
                         const Tensor& pre, const Tensor& y);
void linear_backward_input_gelu(Backend& be, const Tensor& dy, const Tensor& w, const Tensor& pre,
                                const Tensor& dx);

}  // namespace kintsugi::cpu
