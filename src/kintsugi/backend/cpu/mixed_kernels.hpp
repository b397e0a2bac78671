#pragma once
// The mixed-precision CPU kernels: every tensor f32, bf16 or f16 independently (backend.hpp).
// Arithmetic is f32 and is the f32 kernels' own code (shared row bodies): inputs are widened a
// row, slice or chunk at a time into f32 scratch and each result is rounded once to its
// tensor's type. Reductions keep the f32 kernels' order, so they do not depend on the thread
// count either. The scratch comes from the grow-only workspaces; none is allocated per call.
// Each op's kernels are in its own file, beside CpuBackend's override that calls them; this
// header declares the ones another file calls.
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/gemm_mixed.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu::mixed {

// attention_mixed.cpp, called by CpuBackend's overrides in attention.cpp.
void attention_forward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                       ThreadWorkspace& ws);
void attention_backward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                        AnyPtr dout, AnyPtr dqkv, ThreadWorkspace& ws);

// The serial pieces of sum_squares and adamw_step (kernels.hpp), which multi_tensor.cpp shares:
// the sum of squares of elements [begin, end) of one kSumSquaresChunk chunk, in f32; AdamW on
// elements [i0, i0 + len) with len <= kAdamWChunk.
double sum_squares_chunk(AnyPtr x, std::int64_t begin, std::int64_t end);
void adamw_chunk(float* param, AnyPtr grad, float* m, float* v, const AnyPtr* working_copy,
                 std::int64_t i0, std::int64_t len, const AdamWConstants<float>& k);

}  // namespace kintsugi::cpu::mixed
