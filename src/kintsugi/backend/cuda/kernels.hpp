#pragma once
// The CUDA kernels behind CudaBackend, as functions over raw device pointers and a stream. Each
// enqueues its work on `stream` and returns; each checks its launches (cuda_check.hpp). Shapes
// and semantics are those of the Backend op of the same name (backend.hpp); the backend checks
// shapes, these functions trust them.
//
// Element types: every tensor is a Ref (pointer and dtype). Arithmetic is f32 whatever the
// storage types (f32, bf16, f16, mixed freely), or f64 when the tensors are f64 (the backend
// never mixes f64 with other types). Results are rounded once to each output's type.
//
// Determinism: no kernel uses atomics whose order could change a result. Reductions over rows
// (parameter gradients, sums of squares, loss sums) go through fixed partitions summed in a
// fixed order, so the same inputs give the same bits on every run.
//
// This header is plain C++ (no CUDA headers) so that host code includes it freely.
#include <cstddef>
#include <cstdint>

#include "kintsugi/backend/moe_routing.hpp"
#include "kintsugi/core/dtype.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace kintsugi::cuda {

struct Ref {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t count = 0;  // elements: bounds of every access under the test suite's emulator
};

// Causal self-attention geometry (mirrors AttentionShape, without its header).
struct AttnShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t alibi_heads = 0, head_begin = 0;
  std::int64_t first_position = 0;  // RoPE: row t is position first_position + t
  // Document attention: i32 [batch * seq] on the device, each row's document start (null: none).
  const std::int32_t* doc_start = nullptr;
  // Sliding window: query t sees keys t - window + 1..t only (0: all before it).
  std::int64_t window = 0;
};

// One block of ring attention (mirrors AttentionBlock): query rows [q_begin, + q_count) of
// each sequence's `rows` at positions q_position.., key rows [k_begin, + k_count) at k_position...
struct AttnBlock {
  std::int64_t rows = 0;
  std::int64_t q_begin = 0, q_count = 0, q_position = 0;
  std::int64_t k_begin = 0, k_count = 0, k_position = 0;
};

// Scratch a kernel needs, handed in by the caller (sizes from the *_scratch_bytes functions).
struct Scratch {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// ---- elementwise (n elements; outputs may alias inputs element for element)
void add(Ref a, Ref b, Ref out, std::int64_t n, cudaStream_t stream);
void add_bias(Ref x, Ref bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void scale(Ref x, std::int64_t n, double factor, cudaStream_t stream);
void convert(Ref src, Ref dst, std::int64_t n, cudaStream_t stream);
void gelu_forward(Ref x, Ref y, std::int64_t n, cudaStream_t stream);
void gelu_backward(Ref x, Ref dy, Ref dx, std::int64_t n, cudaStream_t stream);
void swiglu_forward(Ref gate, Ref up, Ref y, std::int64_t n, cudaStream_t stream);
void swiglu_backward(Ref gate, Ref up, Ref dy, Ref dgate, Ref dup, std::int64_t n,
                     cudaStream_t stream);
// inv_freq: head_dim / 2 angles per position on the device (backend/rotary.hpp).
void rope(const AttnShape& s, Ref qkv, const double* inv_freq, double scale, bool inverse,
          cudaStream_t stream);

// Per-head RMSNorm of qkv's queries and keys in place (backend.hpp, qk_norm_forward/backward);
// rstd [rows, heads + kv_heads].
void qk_norm_forward(const AttnShape& s, Ref qkv, Ref wq, Ref wk, Ref rstd, double eps,
                     cudaStream_t stream);
void qk_norm_backward(const AttnShape& s, Ref pre, Ref wq, Ref wk, Ref rstd, Ref d_qkv, Ref dwq,
                      Ref dwk, cudaStream_t stream);

// ---- AdamW over a flat range: param, m, v f32 (or all f64); grad any type; working_copy
// (data null when absent) receives the updated param rounded. The constants are computed on the
// host exactly as the CPU backend computes them.
struct AdamWConstants {
  double b1, b2, grad_scale, eps, decay, step_size, inv_sqrt_bc2;
};
void adamw_step(Ref param, Ref grad, Ref m, Ref v, Ref working_copy, std::int64_t n,
                const AdamWConstants& k, cudaStream_t stream);

// ---- Lion over a flat range (Backend::lion_step): param and m f32 (or both f64); grad any
// type; working_copy (data null when absent) receives the updated param rounded. The constants
// are the CPU backend's (backend/cpu/lion.cpp), from the host.
struct LionConstants {
  double b1, b2, grad_scale, lr, decay;
};
void lion_step(Ref param, Ref grad, Ref m, Ref working_copy, std::int64_t n,
               const LionConstants& k, cudaStream_t stream);

// ---- reductions
// Partial sums (one f64 per block) of the squares of x, then sum[0] += their sum.
std::size_t sum_squares_scratch_bytes(std::int64_t n);
void sum_squares(Ref x, std::int64_t n, double* sum, Scratch scratch, cudaStream_t stream);

// ---- many flat ranges in a few launches (Backend::adamw_step_multi, sum_squares_multi): a
// model's optimizer step and gradient norm, hundreds of ranges of 768 elements to 40 million,
// which one launch per range left launch-bound (docs/gpu.md). A table of the ranges (a few dozen
// bytes each) is built on the host at every call and handed to `tables`, which uploads it the
// first time and finds it again on the next call with the same ranges (the optimizer's are fixed
// for a run). Each block takes a fixed slice of one range, found by binary search in the table,
// so a launch covers every range whatever their lengths, and each range's elements are computed
// as the single-range kernel computes them (the same bits). Both functions launch nothing and
// return false when the ranges' element types are not one of the typed kernels' mixes, or
// typed kernels are off (typed_kernels.hpp): the caller then takes the single-range kernels
// range by range.

// Device copies of host tables, kept while calls ask for the same contents (device_tables.hpp).
class TableCache {
 public:
  // A device copy of bytes [host, host + bytes), valid until the next call.
  virtual const void* device_copy(const void* host, std::size_t bytes) = 0;

 protected:
  ~TableCache() = default;
};

// adamw_step on each range (param, m and v of one type, grad of one type, working copies of one
// type or absent), with the constants `decay` where the range's decay is set, `plain` elsewhere.
struct AdamWRangeRef {
  Ref param, grad, m, v, working_copy;  // working_copy.data null: none
  bool decay = false;
};
bool adamw_step_multi(const AdamWRangeRef* ranges, std::int64_t count,
                      const AdamWConstants& decay, const AdamWConstants& plain,
                      TableCache& tables, cudaStream_t stream);
// sum[0] += the sum of squares of each x (xs of one type, x.count elements each) in turn, as
// sum_squares would add them: every range's partial sums in one launch, each range's total in
// a second (one block per range, as sum_squares' second stage), and the totals added to sum[0]
// in order by a third.
std::size_t sum_squares_multi_scratch_bytes(const Ref* xs, std::int64_t count);
bool sum_squares_multi(const Ref* xs, std::int64_t count, double* sum, TableCache& tables,
                       Scratch scratch, cudaStream_t stream);
// out[c] (+)= sum over rows of in[r, c], rows summed in a fixed partition and order.
std::size_t column_sums_scratch_bytes(std::int64_t rows, std::int64_t cols);
void column_sums(Ref in, Ref out, std::int64_t rows, std::int64_t cols, bool accumulate,
                 Scratch scratch, cudaStream_t stream);

// ---- normalization (statistics mean/rstd in their own type, usually f32)
void layernorm_forward(Ref x, Ref w, Ref b, Ref y, Ref mean, Ref rstd, std::int64_t rows,
                       std::int64_t cols, double eps, cudaStream_t stream);
std::size_t norm_backward_scratch_bytes(std::int64_t rows, std::int64_t cols);
void layernorm_backward(Ref dy, Ref x, Ref w, Ref mean, Ref rstd, Ref dx, Ref dw, Ref db,
                        std::int64_t rows, std::int64_t cols, bool accumulate, Scratch scratch,
                        cudaStream_t stream);
void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t cols,
                     double eps, cudaStream_t stream);
void rmsnorm_backward(Ref dy, Ref x, Ref w, Ref rstd, Ref dx, Ref dw, std::int64_t rows,
                      std::int64_t cols, bool accumulate, Scratch scratch, cudaStream_t stream);

// ---- attention (flash-attention style: nothing of size T x T is ever stored)
void attention_forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream);
// One query row per sequence against a key/value cache (Backend::attention_decode).
std::size_t attention_decode_scratch_bytes(const AttnShape& s, std::int64_t position,
                                           DType dtype);
void attention_decode(const AttnShape& s, Ref cache, std::int64_t position, Ref out,
                      Scratch scratch, cudaStream_t stream);
// Backward scratch: delta per row, and the tensor-core backward's f32 dQ partials (at most
// 256 MiB of them: larger calls go in slices; attention_tc.hpp).
std::size_t attention_backward_scratch_bytes(const AttnShape& s, DType lse_dtype);
// Ring attention's blocks (Backend::attention_block_forward / _backward; attention_block.cu):
// s is the whole sequence's shape, kv [B, rows, kv_heads, 2, hd].
void attention_block_forward(const AttnShape& s, const AttnBlock& blk, Ref qkv, Ref kv, Ref out,
                             Ref lse, bool merge, cudaStream_t stream);
void attention_block_backward(const AttnShape& s, const AttnBlock& blk, Ref qkv, Ref kv, Ref out,
                              Ref lse, Ref dout, Ref dqkv, Ref dkv, cudaStream_t stream);
void attention_backward(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv,
                        Scratch scratch, cudaStream_t stream);

// ---- embeddings (tokens: i32 on the device)
void embedding_forward(const std::int32_t* tokens, std::int64_t rows, Ref wte,
                       std::int64_t vocab_rows, Ref out, std::int64_t dim, std::int64_t vocab_begin,
                       cudaStream_t stream);
std::size_t embedding_backward_scratch_bytes(std::int64_t rows);
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, Ref dout, Ref dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin, Scratch scratch, cudaStream_t stream);
void position_embedding_forward(Ref x, std::int64_t rows, Ref wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row, cudaStream_t stream);
void position_embedding_backward(Ref dx, std::int64_t rows, Ref dwpe, std::int64_t position_rows,
                                 std::int64_t dim, std::int64_t seq, bool accumulate,
                                 std::int64_t first_row, cudaStream_t stream);

// ---- softmax cross-entropy in three passes (backend.hpp)
void softmax_row_max(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, cudaStream_t stream);
void softmax_row_sum(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     Ref row_max, const std::int32_t* targets, std::int64_t col_begin, Ref row_sum,
                     Ref target_logit, bool store_exp, cudaStream_t stream);
std::size_t cross_entropy_scratch_bytes(std::int64_t rows);
void cross_entropy_finish(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                          Ref row_max, Ref row_sum, Ref target_logit, const std::int32_t* targets,
                          std::int64_t col_begin, double* loss_sum, bool backward,
                          double grad_scale, Scratch scratch, cudaStream_t stream);
// The loss in one kernel over logits holding the whole vocabulary (Backend::cross_entropy_fused);
// scratch: cross_entropy_scratch_bytes(rows).
void cross_entropy_fused(Ref logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                         const std::int32_t* targets, double* loss_sum, bool backward,
                         double grad_scale, Scratch scratch, cudaStream_t stream);

// ---- mixture of experts (Backend::moe_*, docs/moe.md; moe.cu): N rows, E experts, K choices
// per row, M = N K routed rows of width d. Experts, order and position are i32 on the device;
// losses is f64 [2] (load-balancing, z), added to. Scratch: moe_scratch_bytes(E, M).
std::size_t moe_scratch_bytes(std::int64_t experts, std::int64_t choices);
// bias: f32 [E] on the device, or null.
void moe_route(Ref logits, std::int64_t n, std::int64_t e, const MoeRouting& routing,
               const float* bias, Ref probs, Ref lse, std::int32_t* experts, Ref gates,
               double* losses, Scratch scratch, cudaStream_t stream);
void moe_route_backward(Ref probs, Ref lse, const std::int32_t* experts, Ref gates, Ref d_gates,
                        std::int64_t n, std::int64_t e, std::int64_t k, const MoeRouting& routing,
                        double aux_scale, double z_scale, Ref d_logits, Scratch scratch,
                        cudaStream_t stream);
void moe_dispatch(const std::int32_t* experts, std::int64_t m, std::int64_t e,
                  std::int32_t* order, std::int32_t* position, std::int32_t* counts,
                  Scratch scratch, cudaStream_t stream);
void moe_gather(Ref x, const std::int32_t* order, std::int64_t m, std::int64_t k, std::int64_t d,
                Ref xp, cudaStream_t stream);
// weights: Ref{} for none (the sum of a row's choices).
void moe_combine(Ref src, const std::int32_t* position, Ref weights, std::int64_t n,
                 std::int64_t k, std::int64_t d, Ref out, bool accumulate, cudaStream_t stream);
void moe_combine_backward(Ref dy, Ref src, const std::int32_t* order, const std::int32_t* position,
                          Ref weights, std::int64_t n, std::int64_t k, std::int64_t d, Ref d_src,
                          Ref d_weights, cudaStream_t stream);
void moe_shared_gate(Ref logit, Ref shared, std::int64_t n, std::int64_t d, Ref out,
                     cudaStream_t stream);
void moe_shared_gate_backward(Ref logit, Ref shared, Ref dy, std::int64_t n, std::int64_t d,
                              Ref d_shared, Ref d_logit, cudaStream_t stream);

// ---- GEMM without cuBLASLt (any types, f32 or f64 arithmetic): the fallback when cuBLASLt
// offers no algorithm for a shape, and a second opinion in tests. Row-major
//   C[m, n] (+)= op(A) . op(B) (+ bias[n]),  op(X) = X^T when trans; A is [m,k] or [k,m], etc.
void gemm_simple(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                 bool trans_b, Ref c, bool accumulate, Ref bias, cudaStream_t stream);

}  // namespace kintsugi::cuda
