#pragma once
// Causal self-attention on the tensor cores, for 16-bit (bf16, f16) qkv and head sizes 16, 32,
// 64, 80, 96 and 128 (one kernel instance each): the calls attention.cu and
// attention_backward.cu hand over. Same
// semantics as those (documents, ALiBi, grouped-query heads); the probabilities and their
// gradients are rounded to the qkv type before they multiply V, dO, K and Q, as in
// FlashAttention-2. Plain C++ header.
#include "kintsugi/backend/cuda/kernels.hpp"

namespace kintsugi::cuda::attn_tc {

// Whether these kernels take the call (KINTSUGI_TENSOR_CORE_ATTENTION=0 turns them off, to
// compare with the CUDA-core kernels).
bool takes(const AttnShape& s, const Ref& qkv);

void forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream);
// delta[row] = dO . O per (b, h, t) row, as attention_backward computes it first.
void backward(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
              cudaStream_t stream);

}  // namespace kintsugi::cuda::attn_tc
