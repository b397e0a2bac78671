// Causal self-attention, flash-attention style on the CPU: queries are processed in blocks of
// kBlock rows, each block only against the keys it may see (causality halves the work), with a
// per-thread scratch of kBlock x T scores. Nothing of size T x T outlives a block: forward keeps
// only each row's log-sum-exp, and backward recomputes the probabilities from it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "kintsugi/backend/cpu/attention_common.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi::cpu {

using attn::kBlock;
using attn::QkvLayout;

template <class T>
void attention_forward(const AttentionShape& s, const T* qkv, T* out, T* lse,
                       ThreadWorkspace& ws) {
  const QkvLayout L(s);
  const std::int64_t H = s.heads, hd = s.head_dim, Tn = s.seq, ld = L.row_stride;
  const std::int64_t out_ld = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
  const std::size_t stride = ws.reserve(sizeof(T) * kBlock * Tn);
#pragma omp parallel
  {
    T* scores = reinterpret_cast<T*>(ws.base() + stride * omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < s.batch * H; ++bh) {
      const std::int64_t b = bh / H, h = bh % H, kvh = h / L.group;
      const T* q = qkv + L.q(b, h);
      const T* k = qkv + L.k(b, kvh);
      const T* v = qkv + L.v(b, kvh);
      T* o = out + b * Tn * out_ld + h * hd;
      T* row_lse = lse + (b * H + h) * Tn;
      const T slope = static_cast<T>(attn::head_slope(s, h));
      for (std::int64_t r0 = 0; r0 < Tn; r0 += kBlock) {
        // Keys c0..r0 + rows - 1: column j of the scores is key c0 + j.
        const std::int64_t rows = std::min(kBlock, Tn - r0), c0 = attn::block_first_key(s, r0);
        const std::int64_t cols = r0 + rows - c0;
        gemm(false, true, rows, cols, hd, scale, q + r0 * ld, ld, k + c0 * ld, ld, T(0), scores,
             cols);
        for (std::int64_t i = 0; i < rows; ++i) {
          const std::int64_t first = attn::first_key(s, b, r0 + i) - c0, query = r0 + i - c0;
          attn::add_alibi_row(scores + i * cols, first, query, slope);
          row_lse[r0 + i] = attn::softmax_causal_row(scores + i * cols, first, query + 1, cols);
        }
        gemm(false, false, rows, hd, cols, T(1), scores, cols, v + c0 * ld, ld, T(0),
             o + r0 * out_ld, out_ld);
      }
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const T* qkv, const T* out, const T* lse,
                        const T* dout, T* dqkv, ThreadWorkspace& ws) {
  const QkvLayout L(s);
  const std::int64_t H = s.heads, hd = s.head_dim, Tn = s.seq, ld = L.row_stride;
  const std::int64_t out_ld = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
  // Query heads that share a key/value head write the same dK/dV, so threads own (b, kv head).
  const std::size_t stride = ws.reserve(sizeof(T) * (2 * kBlock * Tn + Tn));
#pragma omp parallel
  {
    T* P = reinterpret_cast<T*>(ws.base() + stride * omp_get_thread_num());
    T* dP = P + kBlock * Tn;
    T* delta = dP + kBlock * Tn;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bk = 0; bk < s.batch * s.kv_heads; ++bk) {
      const std::int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
      const T* k = qkv + L.k(b, kvh);
      const T* v = qkv + L.v(b, kvh);
      T* dk = dqkv + L.k(b, kvh);
      T* dv = dqkv + L.v(b, kvh);
      for (std::int64_t t = 0; t < Tn; ++t)
        for (std::int64_t d = 0; d < hd; ++d) dk[t * ld + d] = dv[t * ld + d] = 0;
      for (std::int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
        const T* q = qkv + L.q(b, h);
        T* dq = dqkv + L.q(b, h);
        const T* o = out + b * Tn * out_ld + h * hd;
        const T* dout_h = dout + b * Tn * out_ld + h * hd;
        const T* row_lse = lse + (b * H + h) * Tn;
        const T slope = static_cast<T>(attn::head_slope(s, h));
        // delta_t = sum_d dO[t,d] O[t,d]  (= sum_j P[t,j] dP[t,j])
        for (std::int64_t t = 0; t < Tn; ++t)
          delta[t] = attn::dot_row(dout_h + t * out_ld, o + t * out_ld, hd);
        for (std::int64_t r0 = 0; r0 < Tn; r0 += kBlock) {
          // Keys c0..r0 + rows - 1, as forward.
          const std::int64_t rows = std::min(kBlock, Tn - r0), c0 = attn::block_first_key(s, r0);
          const std::int64_t cols = r0 + rows - c0;
          const T* kc = k + c0 * ld;
          const T* vc = v + c0 * ld;
          gemm(false, true, rows, cols, hd, scale, q + r0 * ld, ld, kc, ld, T(0), P, cols);
          gemm(false, true, rows, cols, hd, T(1), dout_h + r0 * out_ld, out_ld, vc, ld, T(0), dP,
               cols);
          for (std::int64_t i = 0; i < rows; ++i) {
            const std::int64_t first = attn::first_key(s, b, r0 + i) - c0, query = r0 + i - c0;
            attn::add_alibi_row(P + i * cols, first, query, slope);
            attn::probs_and_dscores_row(P + i * cols, dP + i * cols, first, query + 1, cols,
                                        row_lse[r0 + i], delta[r0 + i]);
          }
          gemm(false, false, rows, hd, cols, scale, dP, cols, kc, ld, T(0), dq + r0 * ld, ld);
          gemm(true, false, cols, hd, rows, scale, dP, cols, q + r0 * ld, ld, T(1), dk + c0 * ld,
               ld);
          gemm(true, false, cols, hd, rows, T(1), P, cols, dout_h + r0 * out_ld, out_ld, T(1),
               dv + c0 * ld, ld);
        }
      }
    }
  }
}

template void attention_forward<float>(const AttentionShape&, const float*, float*, float*,
                                       ThreadWorkspace&);
template void attention_forward<double>(const AttentionShape&, const double*, double*, double*,
                                        ThreadWorkspace&);
template void attention_backward<float>(const AttentionShape&, const float*, const float*,
                                        const float*, const float*, float*, ThreadWorkspace&);
template void attention_backward<double>(const AttentionShape&, const double*, const double*,
                                         const double*, const double*, double*,
                                         ThreadWorkspace&);

// ---- CpuBackend's override (cpu_backend.hpp): checks the element types, then calls a kernel

void CpuBackend::do_attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                      const Tensor& lse) {
  const Kind kind = kind_of({&qkv, &out, &lse});
  if (kind == Kind::mixed)
    return cpu::mixed::attention_forward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse), workspace_);
  typed(kind, [&]<class T>() {
    cpu::attention_forward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), workspace_);
  });
}

void CpuBackend::do_attention_backward(const AttentionShape& s, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, const Tensor& dout,
                                       const Tensor& dqkv) {
  const Kind kind = kind_of({&qkv, &out, &lse, &dout, &dqkv});
  if (kind == Kind::mixed)
    return cpu::mixed::attention_backward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse), AnyPtr(dout),
                                          AnyPtr(dqkv), workspace_);
  typed(kind, [&]<class T>() {
    cpu::attention_backward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), dout.as<T>(), dqkv.as<T>(),
                            workspace_);
  });
}

}  // namespace kintsugi::cpu
