#pragma once
// Whether the optimizer step and the gradient norm take the multi-range ops
// (Backend::adamw_step_multi, sum_squares_multi: a few launches per model chunk on a GPU) or
// one op per range (one launch each: 98 + 148 per GPT-2 124M step, 386 + 580 at 1.5B, the small
// ranges launch-bound; docs/gpu.md). Both give the same bits; the switch is there so that one
// GPU run times both.
namespace kintsugi {

// KINTSUGI_MULTI_TENSOR=0 in the environment turns them off; read once, on the first call.
bool multi_tensor_ops();
// Tests take both paths in one process: overrides the environment from now on.
void set_multi_tensor_ops(bool on);

}  // namespace kintsugi
