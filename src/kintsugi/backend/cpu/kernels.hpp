#pragma once
// The CPU kernels behind CpuBackend, templated on the element type (float for training, double
// for gradient checks); mixed_kernels.hpp has the mixed-precision ones. Shapes follow
// backend.hpp; every kernel is parallel with OpenMP and, where it reduces, reduces in an order
// that does not depend on the number of threads. Each op's kernels are in its own file, beside
// CpuBackend's override that calls them (cpu_backend.hpp); this header declares the ones another
// file calls.
#include <cmath>
#include <cstdint>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

// elementwise.cpp; linear_forward adds its bias with it.
template <class T>
void add_bias(T* x, const T* bias, std::int64_t rows, std::int64_t cols);

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
