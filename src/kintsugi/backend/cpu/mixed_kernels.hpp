#pragma once
// The mixed-precision CPU kernels: every tensor f32, bf16 or f16 independently (backend.hpp).
// Arithmetic is f32 and is the f32 kernels' own code (shared row bodies): inputs are widened a
// row, slice or chunk at a time into f32 scratch and each result is rounded once to its
// tensor's type. Reductions keep the f32 kernels' order, so they do not depend on the thread
// count either. The scratch comes from the grow-only workspaces; none is allocated per call.
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/gemm_mixed.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu::mixed {

void linear_forward(AnyPtr x, AnyPtr w, const AnyPtr* bias, AnyPtr y, std::int64_t m,
                    std::int64_t n, std::int64_t k, bool accumulate, GemmWorkspace& ws);
void linear_backward_input(AnyPtr dy, AnyPtr w, AnyPtr dx, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate, GemmWorkspace& ws);
void linear_backward_weight(AnyPtr dy, AnyPtr x, AnyPtr dw, const AnyPtr* db, std::int64_t m,
                            std::int64_t n, std::int64_t k, bool accumulate, GemmWorkspace& ws);
void column_sums(AnyPtr in, AnyPtr out, std::int64_t rows, std::int64_t cols, bool accumulate);

void layernorm_forward(AnyPtr x, AnyPtr w, AnyPtr b, AnyPtr y, AnyPtr mean, AnyPtr rstd,
                       std::int64_t rows, std::int64_t cols, double eps, ThreadWorkspace& ws);
void layernorm_backward(AnyPtr dy, AnyPtr x, AnyPtr w, AnyPtr mean, AnyPtr rstd, AnyPtr dx,
                        AnyPtr dw, AnyPtr db, std::int64_t rows, std::int64_t cols,
                        bool accumulate, ThreadWorkspace& ws);

void rmsnorm_forward(AnyPtr x, AnyPtr w, AnyPtr y, AnyPtr rstd, std::int64_t rows,
                     std::int64_t cols, double eps, ThreadWorkspace& ws);
void rmsnorm_backward(AnyPtr dy, AnyPtr x, AnyPtr w, AnyPtr rstd, AnyPtr dx, AnyPtr dw,
                      std::int64_t rows, std::int64_t cols, bool accumulate, ThreadWorkspace& ws);

void swiglu_forward(AnyPtr gate, AnyPtr up, AnyPtr y, std::int64_t n);
void swiglu_backward(AnyPtr gate, AnyPtr up, AnyPtr dy, AnyPtr dgate, AnyPtr dup,
                     std::int64_t n);

void rope(const AttentionShape& s, AnyPtr qkv, double theta, bool inverse, ThreadWorkspace& ws);

void gelu_forward(AnyPtr x, AnyPtr y, std::int64_t n);
void gelu_backward(AnyPtr x, AnyPtr dy, AnyPtr dx, std::int64_t n);

void attention_forward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                       ThreadWorkspace& ws);
void attention_backward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                        AnyPtr dout, AnyPtr dqkv, ThreadWorkspace& ws);
void attention_decode(const AttentionShape& s, AnyPtr cache, std::int64_t position, AnyPtr out,
                      ThreadWorkspace& ws);

void embedding_forward(const std::int32_t* tokens, std::int64_t rows, AnyPtr wte,
                       std::int64_t vocab_rows, AnyPtr out, std::int64_t dim,
                       std::int64_t vocab_begin);
// `index` holds the rows grouped by token when dwte is not f32 (see embedding.cpp).
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, AnyPtr dout, AnyPtr dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin, GrowBuffer& index);
void position_embedding_forward(AnyPtr x, std::int64_t rows, AnyPtr wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row);
void position_embedding_backward(AnyPtr dx, std::int64_t rows, AnyPtr dwpe,
                                 std::int64_t position_rows, std::int64_t dim, std::int64_t seq,
                                 bool accumulate, std::int64_t first_row);

void softmax_row_max(AnyPtr logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     AnyPtr row_max, ThreadWorkspace& ws);
void softmax_row_sum(AnyPtr logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     AnyPtr row_max, const std::int32_t* targets, std::int64_t col_begin,
                     AnyPtr row_sum, AnyPtr target_logit, bool store_exp, ThreadWorkspace& ws);
void cross_entropy_finish(AnyPtr logits, std::int64_t rows, std::int64_t cols,
                          std::int64_t valid, AnyPtr row_max, AnyPtr row_sum,
                          AnyPtr target_logit, const std::int32_t* targets,
                          std::int64_t col_begin, double* losses, bool backward,
                          double grad_scale, ThreadWorkspace& ws);
void cross_entropy_fused(AnyPtr logits, std::int64_t rows, std::int64_t cols,
                         std::int64_t valid, const std::int32_t* targets, double* losses,
                         bool backward, double grad_scale, ThreadWorkspace& ws);

void add(AnyPtr a, AnyPtr b, AnyPtr out, std::int64_t n);
void add_bias(AnyPtr x, AnyPtr bias, std::int64_t rows, std::int64_t cols, ThreadWorkspace& ws);
void scale(AnyPtr x, std::int64_t n, double factor);
// `partial` holds one double per 64Ki-element chunk.
double sum_squares(AnyPtr x, std::int64_t n, GrowBuffer& partial);
// param, m and v are f32; grad any; working_copy (optional, any) receives param rounded.
void adamw_step(float* param, AnyPtr grad, float* m, float* v, const AnyPtr* working_copy,
                std::int64_t n, const AdamWHyper& h);
// Their serial pieces (kernels.hpp): the sum of squares of elements [begin, end) of one
// kSumSquaresChunk chunk, in f32; AdamW on elements [i0, i0 + len) with len <= kAdamWChunk.
double sum_squares_chunk(AnyPtr x, std::int64_t begin, std::int64_t end);
void adamw_chunk(float* param, AnyPtr grad, float* m, float* v, const AnyPtr* working_copy,
                 std::int64_t i0, std::int64_t len, const AdamWConstants<float>& k);

}  // namespace kintsugi::cpu::mixed
