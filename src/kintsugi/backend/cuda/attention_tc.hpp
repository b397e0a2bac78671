#pragma once
// Causal self-attention on the tensor cores, for 16-bit (bf16, f16) qkv and head sizes 16, 32,
// 64, 80, 96 and 128 (one kernel instance each): the calls attention.cu and
// attention_backward.cu hand over. Same
// semantics as those (documents, ALiBi, grouped-query heads); the probabilities and their
// gradients are rounded to the qkv type before they multiply V, dO, K and Q, as in
// FlashAttention-2. Plain C++ header.
#include <cstddef>

#include "kintsugi/backend/cuda/kernels.hpp"

namespace kintsugi {
class Switches;  // core/switches.hpp, which nvcc's C++17 does not compile
}

namespace kintsugi::cuda::attn_tc {

// The kernels' variants, so that one build times each change against what came before (on by
// default but the fused backward; the switch named, set to 0, turns one off, and
// KINTSUGI_ATTN_BWD_FUSED=1 the fused backward on: core/switches.hpp). The defaults here are the
// switches' defaults (CudaDenseSwitches.AttentionVariantFromSwitches).
struct Variant {
  bool tensor_cores = true;  // KINTSUGI_TENSOR_CORE_ATTENTION: off sends calls to the CUDA cores
  // KINTSUGI_ATTN_TILE_MASKS: masks and ALiBi only on the tiles that need them, in 32-bit
  // offsets, scale folded into the exponent's FMA; off: every element of every tile in 64-bit.
  bool tile_masks = true;
  // KINTSUGI_ATTN_SKIP_MASKED (with tile_masks): skip the products over 16-row blocks the causal
  // mask hides from a whole warp (diagonal tiles).
  bool skip_masked = true;
  // KINTSUGI_ATTN_HEAVY_FIRST: blocks ordered heaviest tiles first within groups of (sequence,
  // head) units; off: unit by unit.
  bool heavy_first = true;
  // KINTSUGI_ATTN_BWD_FUSED=1 (with tile_masks): backward in one pass over the key tiles (5
  // products, dQ from f32 partials summed in a fixed order); off: dK/dV and dQ kernels (7).
  // Off by default: on an H200 the GPT-2 124M step took 79.0 ms with it and 77.7 without
  // (docs/gpu.md, "Measured"): the partials' 19.6 GB per step cost more than the two products
  // they save.
  bool fused_backward = false;
  // The most scratch the fused backward's dQ partials take (KINTSUGI_ATTN_BWD_SCRATCH_MIB);
  // larger calls go through it in slices of (sequence, kv head) units. 256 MiB holds 120 of
  // GPT-2 124M's 384 units at B = 32, T = 1024 (2.1 MiB each): 4 slices of 96.
  std::size_t fused_scratch_cap = std::size_t{256} << 20;
  // KINTSUGI_ATTN_BWD_MORE_BLOCKS (with tile_masks, the two-kernel backward, head sizes up to
  // 64): the dK/dV kernel compiled for 3 resident blocks per SM instead of the 2 its registers
  // allow (213 per thread at bf16, head size 64; capped at 168, ptxas spills 40-100 bytes), the
  // default ("dkdv"); "dq" the dQ kernel for 4 instead of 3 (151 registers capped at 128), "1"
  // both, "0" neither. Same arithmetic, so the same bits. On an H200 the GPT-2 124M step took
  // 75.0 ms with neither, 73.1 with dK/dV's, 74.8 with dQ's, 73.2 with both (docs/gpu.md).
  bool more_blocks_dkdv = true, more_blocks_dq = false;
  // KINTSUGI_ATTN_BWD_DKDV_PASSES=2 (with tile_masks, the two-kernel backward, head sizes up to
  // 64): the dK/dV kernel takes each 64-query tile in two passes of 32, as it does from head
  // size 96 on: S^T and dP^T of 32 queries next to dK and dV instead of 64, 32 fewer f32
  // registers per thread: at head size 64 ptxas fits the 168-register cap of 3 blocks per SM
  // without spills (one pass: 52 bytes stored, 84 loaded), so it is compiled for 3 blocks
  // whatever more_blocks_dkdv says. Same products in the same order, so the same bits. Off by
  // default until timed on a GPU.
  bool dkdv_two_passes = false;
};
Variant variant_from(const Switches& switches);
Variant variant();  // variant_from(Switches::process()) at the first call
void set_variant(const Variant& v);  // tests: both paths in one process

// Whether these kernels take the call.
bool takes(const AttnShape& s, const Ref& qkv);

void forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream);

// Scratch the backward wants for its dQ partials (0 when the fused backward is off or the
// head size is not one of these kernels'), bounded: larger shapes go through it in slices of
// (sequence, kv head) units.
std::size_t backward_scratch_bytes(const AttnShape& s);
// delta[row] = dO . O per (b, h, t) row, as attention_backward computes it first. `partials`:
// the scratch above (less than that falls back to the two-kernel backward).
void backward(const AttnShape& s, Ref qkv, Ref lse, Ref dout, const float* delta, Ref dqkv,
              Scratch partials, cudaStream_t stream);

}  // namespace kintsugi::cuda::attn_tc
