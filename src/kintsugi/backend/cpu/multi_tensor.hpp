#pragma once
// The multi-range ops on the CPU (Backend::sum_squares_multi, adamw_step_multi): one parallel
// loop over the chunks of every range, each chunk computed by the serial piece the single-range
// kernels use (kernels.hpp, mixed_kernels.hpp), so the results are theirs bit for bit. Each
// range takes the kernel adamw_step or sum_squares would give it alone: the templated one when
// all its tensors are f32 (no working copy) or all f64, the mixed one otherwise. The caller
// (CpuBackend) has checked the types and lengths.
#include <span>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

// *sum += the sum of squares of each of xs, in the list's order; `partial` holds one double per
// chunk of every range.
void sum_squares_multi(std::span<const Tensor> xs, double* sum, GrowBuffer& partial);
void adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h);

}  // namespace kintsugi::cpu
