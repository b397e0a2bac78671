#pragma once
// The CPU kernels behind CpuBackend, templated on the element type (float for training, double
// for gradient checks); mixed_kernels.hpp has the mixed-precision ones. Shapes follow backend.hpp; every kernel is parallel with OpenMP and,
// where it reduces, reduces in an order that does not depend on the number of threads.
#include <cmath>
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

template <class T>
void linear_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t m, std::int64_t n,
                    std::int64_t k, bool accumulate);
template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate);
template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dw, T* db, std::int64_t m,
                            std::int64_t n, std::int64_t k, bool accumulate);
// out[c] (+)= sum over rows r of in[r, c]
template <class T>
void column_sums(const T* in, T* out, std::int64_t rows, std::int64_t cols, bool accumulate);

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                       std::int64_t rows, std::int64_t cols, double eps);
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                        T* dw, T* db, std::int64_t rows, std::int64_t cols, bool accumulate);

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t cols,
                     double eps);
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw,
                      std::int64_t rows, std::int64_t cols, bool accumulate);

template <class T>
void swiglu_forward(const T* gate, const T* up, T* y, std::int64_t n);
template <class T>
void swiglu_backward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, std::int64_t n);

template <class T>
void rope(const AttentionShape& s, T* qkv, double theta, bool inverse);

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n);
template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n);

template <class T>
void attention_forward(const AttentionShape& s, const T* qkv, T* out, T* lse,
                       ThreadWorkspace& ws);
template <class T>
void attention_backward(const AttentionShape& s, const T* qkv, const T* out, const T* lse,
                        const T* dout, T* dqkv, ThreadWorkspace& ws);
template <class T>
void attention_decode(const AttentionShape& s, const T* cache, std::int64_t position, T* out,
                      ThreadWorkspace& ws);

template <class T>
void embedding_forward(const std::int32_t* tokens, std::int64_t rows, const T* wte,
                       std::int64_t vocab_rows, T* out, std::int64_t dim,
                       std::int64_t vocab_begin);
template <class T>
void embedding_backward(const std::int32_t* tokens, std::int64_t rows, const T* dout, T* dwte,
                        std::int64_t vocab_rows, std::int64_t dim, bool accumulate,
                        std::int64_t vocab_begin);
template <class T>
void position_embedding_forward(T* x, std::int64_t rows, const T* wpe, std::int64_t dim,
                                std::int64_t seq, std::int64_t first_row);
template <class T>
void position_embedding_backward(const T* dx, std::int64_t rows, T* dwpe,
                                 std::int64_t position_rows, std::int64_t dim, std::int64_t seq,
                                 bool accumulate, std::int64_t first_row);

template <class T>
void softmax_row_max(const T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     T* row_max);
template <class T>
void softmax_row_sum(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                     const T* row_max, const std::int32_t* targets, std::int64_t col_begin,
                     T* row_sum, T* target_logit, bool store_exp);
template <class T>
void cross_entropy_finish(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                          const T* row_max, const T* row_sum, const T* target_logit,
                          const std::int32_t* targets, std::int64_t col_begin, double* losses,
                          bool backward, double grad_scale);
// Backend::cross_entropy_fused; losses[r] receives row r's loss (cross_entropy_fused.cpp).
template <class T>
void cross_entropy_fused(T* logits, std::int64_t rows, std::int64_t cols, std::int64_t valid,
                         const std::int32_t* targets, double* losses, bool backward,
                         double grad_scale);

template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n);
template <class T>
void add_bias(T* x, const T* bias, std::int64_t rows, std::int64_t cols);
template <class T>
void scale(T* x, std::int64_t n, double factor);
template <class T>
double sum_squares(const T* x, std::int64_t n);
template <class T>
void adamw_step(T* param, const T* grad, T* m, T* v, std::int64_t n, const AdamWHyper& h);

// ---- the serial pieces sum_squares and adamw_step split their work into (the mixed kernels'
// too), shared with the multi-range ops (multi_tensor.cpp) so that both give the same bits.
// sum_squares: chunks of kSumSquaresChunk elements, each summed on its own, the chunk sums then
// added in order. AdamW: chunks of kAdamWChunk elements (the mixed kernels' staging size).
inline constexpr std::int64_t kSumSquaresChunk = 1 << 16;
inline constexpr std::int64_t kAdamWChunk = 2048;

// AdamW's constants in the arithmetic's type, from the hyperparameters once per call.
template <class T>
struct AdamWConstants {
  T b1, b2, gs, eps, decay, step_size, inv_sqrt_bc2;
  explicit AdamWConstants(const AdamWHyper& h)
      : b1(static_cast<T>(h.beta1)),
        b2(static_cast<T>(h.beta2)),
        gs(static_cast<T>(h.grad_scale)),
        eps(static_cast<T>(h.eps)),
        decay(static_cast<T>(1.0 - h.lr * h.weight_decay)),
        step_size(static_cast<T>(h.lr / (1.0 - std::pow(h.beta1, double(h.step))))),
        inv_sqrt_bc2(static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, double(h.step))))) {}
};

// The sum of squares of x[0..n) (n <= kSumSquaresChunk), in T.
template <class T>
double sum_squares_chunk(const T* x, std::int64_t n);
// AdamW on elements [0, n) (n <= kAdamWChunk).
template <class T>
void adamw_chunk(T* param, const T* grad, T* m, T* v, std::int64_t n, const AdamWConstants<T>& k);

}  // namespace kintsugi::cpu
