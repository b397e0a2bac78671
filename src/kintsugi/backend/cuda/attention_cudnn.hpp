#pragma once
// Causal self-attention on cuDNN's fused attention (its graph API: the scores, the causal mask,
// the softmax and both products of the forward in one graph, the backward's in another), chosen
// with KINTSUGI_ATTN_CUDNN: "1" the deterministic backward (dQ summed in one place, dP kept in
// a workspace) on engines cuDNN does not mark non-deterministic, "any" the default one (dQ
// accumulated atomically in f32) on any engine, to time what determinism costs; unset or "0",
// never. Off by default:
// not yet run on a GPU (docs/gpu.md). Same semantics and layouts as attention.cu: qkv
// [B, T, H, 3, D], out and dout [B, T, H, D], lse [B, H, T] natural-log sums of the scaled
// scores' exponentials (what our backward reads, so either forward pairs with either backward).
// Plain C++ header.
#include <cstddef>
#include <string>

#include "kintsugi/backend/cuda/kernels.hpp"

namespace kintsugi::cuda::attn_cudnn {

// Whether this build has cuDNN and it loads on this machine's GPU; `why`, when not, says why.
bool usable(std::string* why = nullptr);

enum class Mode { off, deterministic, any };
Mode mode();  // from KINTSUGI_ATTN_CUDNN at the first call
void set_mode(Mode m);  // tests

// Whether cuDNN takes the call: the mode is on, this build has cuDNN and it loads, 16-bit qkv,
// f32 statistics, plain causal attention (no documents, no ALiBi, as many key/value heads as
// query heads), a head size that is a multiple of 8 up to 128, and cuDNN built a plan for the
// shape (the first call per shape builds it; a refusal is reported once on stderr and the
// shape stays with kintsugi's kernels).
bool takes_forward(const AttnShape& s, const Ref& qkv, const Ref& lse);
bool takes_backward(const AttnShape& s, const Ref& qkv, const Ref& lse);

void forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream);

// Scratch of the backward: the rows' dO . O sums and, with mode any, the f32 dQ accumulator (0
// with the mode off). cuDNN's own workspace is not part of it: attention_cudnn.cpp keeps that.
std::size_t backward_scratch_bytes(const AttnShape& s);
void backward(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv, Scratch scratch,
              cudaStream_t stream);

}  // namespace kintsugi::cuda::attn_cudnn
