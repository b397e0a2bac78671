// Ring attention's block kernels (backend.hpp, AttentionBlock): a run of query rows against a
// run of key/value rows at their positions in the whole sequence, the forward merged into a
// running output and log-sum-exp, the backward accumulated. Blocked like attention.cpp: kBlock
// query rows at a time, each multiplied only against the keys the block's masks may let it
// see, the same row bodies (attention_common.hpp) between the GEMMs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "kintsugi/backend/cpu/attention_common.hpp"
#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/math.hpp"
#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cpu {

namespace {

using attn::kBlock;

// Addressing of the block's tensors: packed qkv and out/lse with `rows` rows per sequence (the
// queries), kv [B, rows, kv_heads, 2, hd] (the keys).
struct BlockLayout {
  std::int64_t group, ld, kv_ld, out_ld, rows, hd;
  BlockLayout(const AttentionShape& s, const AttentionBlock& blk)
      : group(s.heads / s.kv_heads),
        ld(s.kv_heads * (s.heads / s.kv_heads + 2) * s.head_dim),
        kv_ld(s.kv_heads * 2 * s.head_dim),
        out_ld(s.heads * s.head_dim),
        rows(blk.rows),
        hd(s.head_dim) {}
  std::int64_t q(std::int64_t b, std::int64_t h) const {
    return b * rows * ld + ((h / group) * (group + 2) + h % group) * hd;
  }
  std::int64_t k(std::int64_t b, std::int64_t kvh) const { return b * rows * kv_ld + kvh * 2 * hd; }
  std::int64_t out(std::int64_t b, std::int64_t h) const { return b * rows * out_ld + h * hd; }
};

// The keys a run of query rows [r0, r0 + n) of the block may see, as key indexes [lo, hi) of
// the block's run (hi <= lo: none): none past the last query's position, and with a window none
// before the first query's window.
struct KeyRange {
  std::int64_t lo, hi;
};
KeyRange key_range(const AttentionShape& s, const AttentionBlock& blk, std::int64_t r0,
                   std::int64_t n) {
  const std::int64_t first_query = blk.q_position + r0, last_query = first_query + n - 1;
  std::int64_t lo = 0;
  if (s.window > 0) lo = std::max<std::int64_t>(0, first_query - s.window + 1 - blk.k_position);
  const std::int64_t hi = std::min(blk.k_count, last_query - blk.k_position + 1);
  return {lo, hi};
}

// The visible columns [a, e) of query position qp of sequence b among the scores' columns,
// which are keys lo, lo + 1, ... of the block (positions k_position + lo + j).
struct Visible {
  std::int64_t a, e;
};
Visible visible(const AttentionShape& s, const AttentionBlock& blk, std::int64_t b,
                std::int64_t qp, KeyRange kr) {
  const std::int64_t first = attn::first_key(s, b, qp);  // in whole-sequence positions
  const std::int64_t base = blk.k_position + kr.lo;
  return {std::max<std::int64_t>(first - base, 0), std::min(qp - base + 1, kr.hi - kr.lo)};
}

// ALiBi: slope times the key's position less the query's, over the visible columns.
template <class T>
void add_alibi(T* row, Visible v, std::int64_t key0, std::int64_t qp, T slope) {
  if (slope == T(0)) return;
  for (std::int64_t j = v.a; j < v.e; ++j) row[j] += slope * static_cast<T>(key0 + j - qp);
}


// A head's run of rows as the kernel's type T: the tensor's own memory (p, ld) when it holds
// T, else (16-bit inputs of the f32 kernel, mixed precision) widened into `scratch`, hd apart.
// Inputs are `const T*` for the one-type kernels and AnyPtr for the mixed ones.
template <class T>
struct HeadRows {
  const T* p;
  std::int64_t ld;
  const T* row(std::int64_t r) const { return p + r * ld; }
};
template <class T>
HeadRows<T> head_rows(const T* base, std::int64_t at, std::int64_t ld, std::int64_t, std::int64_t,
                      T*) {
  return {base + at, ld};
}
inline HeadRows<float> head_rows(AnyPtr base, std::int64_t at, std::int64_t ld, std::int64_t n,
                                 std::int64_t hd, float* scratch) {
  if (base.is_f32()) return {base.f32() + at, ld};
  for (std::int64_t r = 0; r < n; ++r) widen(base.at(at + r * ld).half(), base.dtype, scratch + r * hd, hd);
  return {scratch, hd};
}
// Scratch elements a head's run of n rows takes (none where the input is used in place).
template <class T>
std::int64_t staged(const T*, std::int64_t, std::int64_t) {
  return 0;
}
inline std::int64_t staged(AnyPtr p, std::int64_t n, std::int64_t hd) { return p.is_f32() ? 0 : n * hd; }

}  // namespace

// In: const T* (every tensor of one type) or AnyPtr (mixed precision, T = float: the inputs in
// any type, the running state out/lse in f32).
template <class T, class In>
void attention_block_forward(const AttentionShape& s, const AttentionBlock& blk, In qkv, In kv,
                             T* out, T* lse, bool merge, ThreadWorkspace& ws) {
  const BlockLayout L(s, blk);
  const std::int64_t H = s.heads, hd = s.head_dim;
  const T scale = T(1) / std::sqrt(T(hd));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t kc = std::max<std::int64_t>(blk.k_count, 1);
  const std::int64_t q_staged = staged(qkv, blk.q_count, hd), k_staged = staged(kv, kc, hd);
  const std::size_t stride =
      ws.reserve(sizeof(T) * (kBlock * (kc + hd) + q_staged + 2 * k_staged));
#pragma omp parallel
  {
    T* scores = reinterpret_cast<T*>(ws.base() + stride * omp_get_thread_num());
    T* block_out = scores + kBlock * kc;
    T* q_scratch = block_out + kBlock * hd;
    T* k_scratch = q_scratch + q_staged;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < s.batch * H; ++bh) {
      const std::int64_t b = bh / H, h = bh % H, kvh = h / L.group;
      const HeadRows<T> q = head_rows(qkv, L.q(b, h) + blk.q_begin * L.ld, L.ld, blk.q_count, hd,
                                      q_scratch);
      const std::int64_t k_at = L.k(b, kvh) + blk.k_begin * L.kv_ld;
      const HeadRows<T> k = head_rows(kv, k_at, L.kv_ld, blk.k_count, hd, k_scratch);
      const HeadRows<T> v = head_rows(kv, k_at + hd, L.kv_ld, blk.k_count, hd, k_scratch + k_staged);
      T* o = out + L.out(b, h) + blk.q_begin * L.out_ld;
      T* row_lse = lse + (b * H + h) * L.rows + blk.q_begin;
      const T slope = static_cast<T>(attn::head_slope(s, h));
      for (std::int64_t r0 = 0; r0 < blk.q_count; r0 += kBlock) {
        const std::int64_t n = std::min(kBlock, blk.q_count - r0);
        const KeyRange kr = key_range(s, blk, r0, n);
        const std::int64_t cols = kr.hi - kr.lo;
        if (cols <= 0) {  // no key of the block is visible to these rows
          if (!merge)
            for (std::int64_t i = 0; i < n; ++i) {
              row_lse[r0 + i] = minus_inf;
              std::fill_n(o + (r0 + i) * L.out_ld, hd, T(0));
            }
          continue;
        }
        gemm(false, true, n, cols, hd, scale, q.row(r0), q.ld, k.row(kr.lo), k.ld, T(0), scores,
             cols);
        T block_lse[kBlock];
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t qp = blk.q_position + r0 + i;
          const Visible vis = visible(s, blk, b, qp, kr);
          T* row = scores + i * cols;
          if (vis.a >= vis.e) {
            std::fill_n(row, cols, T(0));
            block_lse[i] = minus_inf;
            continue;
          }
          add_alibi(row, vis, blk.k_position + kr.lo, qp, slope);
          block_lse[i] = attn::softmax_causal_row(row, vis.a, vis.e, cols);
        }
        gemm(false, false, n, hd, cols, T(1), scores, cols, v.row(kr.lo), v.ld, T(0), block_out,
             hd);
        // Merge each row's block output into the running state (backend.hpp).
        for (std::int64_t i = 0; i < n; ++i) {
          T* o_row = o + (r0 + i) * L.out_ld;
          const T* b_row = block_out + i * hd;
          T& l = row_lse[r0 + i];
          const T lb = block_lse[i];
          if (!merge || l == minus_inf) {
            l = lb;
            if (lb == minus_inf) std::fill_n(o_row, hd, T(0));
            else std::copy_n(b_row, hd, o_row);
            continue;
          }
          if (lb == minus_inf) continue;
          const T m = std::max(l, lb);
          const T merged = m + std::log(std::exp(l - m) + std::exp(lb - m));
          const T keep = std::exp(l - merged), add = std::exp(lb - merged);
          for (std::int64_t d = 0; d < hd; ++d) o_row[d] = keep * o_row[d] + add * b_row[d];
          l = merged;
        }
      }
    }
  }
}

// In as for the forward: qkv, kv, out and dout in any type, lse and the sums dqkv, dkv in T.
template <class T, class In>
void attention_block_backward(const AttentionShape& s, const AttentionBlock& blk, In qkv, In kv,
                              In out, const T* lse, In dout, T* dqkv, T* dkv,
                              ThreadWorkspace& ws) {
  const BlockLayout L(s, blk);
  const std::int64_t H = s.heads, hd = s.head_dim;
  const T scale = T(1) / std::sqrt(T(hd));
  const std::int64_t kc = std::max<std::int64_t>(blk.k_count, 1);
  const std::int64_t k_staged = staged(kv, kc, hd);
  const std::int64_t q_staged = staged(qkv, blk.q_count, hd);
  const std::int64_t o_staged = staged(out, blk.q_count, hd);
  const std::int64_t dout_staged = staged(dout, blk.q_count, hd);
  // Per thread: delta of each query row, the block's probabilities and their gradient, and the
  // 16-bit inputs widened.
  const std::size_t stride = ws.reserve(sizeof(T) * (blk.q_count + 2 * kBlock * kc +
                                                     2 * k_staged + q_staged + o_staged + dout_staged));
#pragma omp parallel
  {
    T* const delta = reinterpret_cast<T*>(ws.base() + stride * omp_get_thread_num());
    T* const P = delta + blk.q_count;
    T* const dP = P + kBlock * kc;
    T* const k_scratch = dP + kBlock * kc;
    T* const q_scratch = k_scratch + 2 * k_staged;
    T* const o_scratch = q_scratch + q_staged;
    T* const dout_scratch = o_scratch + o_staged;
    // Query heads that share a key/value head add into the same dK/dV: a thread owns one.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < s.batch * s.kv_heads; ++task) {
      const std::int64_t b = task / s.kv_heads, kvh = task % s.kv_heads;
      const std::int64_t k_at = L.k(b, kvh) + blk.k_begin * L.kv_ld;
      const HeadRows<T> k = head_rows(kv, k_at, L.kv_ld, blk.k_count, hd, k_scratch);
      const HeadRows<T> v = head_rows(kv, k_at + hd, L.kv_ld, blk.k_count, hd, k_scratch + k_staged);
      T* dk = dkv + k_at;
      T* dv = dk + hd;
      for (std::int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
        const HeadRows<T> q = head_rows(qkv, L.q(b, h) + blk.q_begin * L.ld, L.ld, blk.q_count,
                                        hd, q_scratch);
        T* dq = dqkv + L.q(b, h) + blk.q_begin * L.ld;
        const std::int64_t o_at = L.out(b, h) + blk.q_begin * L.out_ld;
        const HeadRows<T> o = head_rows(out, o_at, L.out_ld, blk.q_count, hd, o_scratch);
        const HeadRows<T> dout_h = head_rows(dout, o_at, L.out_ld, blk.q_count, hd, dout_scratch);
        const T* row_lse = lse + (b * H + h) * L.rows + blk.q_begin;
        const T slope = static_cast<T>(attn::head_slope(s, h));
        for (std::int64_t t = 0; t < blk.q_count; ++t)
          delta[t] = attn::dot_row(dout_h.row(t), o.row(t), hd);
        for (std::int64_t r0 = 0; r0 < blk.q_count; r0 += kBlock) {
          const std::int64_t n = std::min(kBlock, blk.q_count - r0);
          const KeyRange kr = key_range(s, blk, r0, n);
          const std::int64_t cols = kr.hi - kr.lo;
          if (cols <= 0) continue;
          gemm(false, true, n, cols, hd, scale, q.row(r0), q.ld, k.row(kr.lo), k.ld, T(0), P,
               cols);
          gemm(false, true, n, cols, hd, T(1), dout_h.row(r0), dout_h.ld, v.row(kr.lo), v.ld,
               T(0), dP, cols);
          for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t qp = blk.q_position + r0 + i;
            const Visible vis = visible(s, blk, b, qp, kr);
            T* p_row = P + i * cols;
            T* dp_row = dP + i * cols;
            if (vis.a >= vis.e) {
              std::fill_n(p_row, cols, T(0));
              std::fill_n(dp_row, cols, T(0));
              continue;
            }
            add_alibi(p_row, vis, blk.k_position + kr.lo, qp, slope);
            attn::probs_and_dscores_row(p_row, dp_row, vis.a, vis.e, cols, row_lse[r0 + i],
                                        delta[r0 + i]);
          }
          gemm(false, false, n, hd, cols, scale, dP, cols, k.row(kr.lo), k.ld, T(1),
               dq + r0 * L.ld, L.ld);
          gemm(true, false, cols, hd, n, scale, dP, cols, q.row(r0), q.ld, T(1),
               dk + kr.lo * L.kv_ld, L.kv_ld);
          gemm(true, false, cols, hd, n, T(1), P, cols, dout_h.row(r0), dout_h.ld, T(1),
               dv + kr.lo * L.kv_ld, L.kv_ld);
        }
      }
    }
  }
}

// ---- CpuBackend's overrides (cpu_backend.hpp): every tensor f32 or every tensor f64, or in
// mixed precision (the ring under bf16/fp16, docs/parallelism.md) the inputs in any of f32,
// bf16, f16 and the running state (out and lse forward; lse, dqkv and dkv backward) in f32, so
// that no merge or sum rounds to 16 bits.

namespace {
void check_state(std::initializer_list<const Tensor*> state) {
  for (const Tensor* t : state)
    if (t->dtype != DType::f32)
      fail("ring attention's block kernels keep their running state in f32 when their inputs "
           "are 16-bit (got a {} tensor)",
           name_of(t->dtype));
}
}  // namespace

void CpuBackend::do_attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                                            const Tensor& qkv, const Tensor& kv,
                                            const Tensor& out, const Tensor& lse, bool merge) {
  const Kind kind = kind_of({&qkv, &kv, &out, &lse});
  if (kind == Kind::mixed) {
    check_state({&out, &lse});
    return cpu::attention_block_forward(s, blk, AnyPtr(qkv), AnyPtr(kv), out.as<float>(),
                                        lse.as<float>(), merge, workspace_);
  }
  typed(kind, [&]<class T>() {
    cpu::attention_block_forward(s, blk, static_cast<const T*>(qkv.as<T>()),
                                 static_cast<const T*>(kv.as<T>()), out.as<T>(), lse.as<T>(),
                                 merge, workspace_);
  });
}

void CpuBackend::do_attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                             const Tensor& qkv, const Tensor& kv,
                                             const Tensor& out, const Tensor& lse,
                                             const Tensor& dout, const Tensor& dqkv,
                                             const Tensor& dkv) {
  const Kind kind = kind_of({&qkv, &kv, &out, &lse, &dout, &dqkv, &dkv});
  if (kind == Kind::mixed) {
    check_state({&lse, &dqkv, &dkv});
    return cpu::attention_block_backward(s, blk, AnyPtr(qkv), AnyPtr(kv), AnyPtr(out),
                                         lse.as<float>(), AnyPtr(dout), dqkv.as<float>(),
                                         dkv.as<float>(), workspace_);
  }
  typed(kind, [&]<class T>() {
    const auto in = [](const Tensor& t) { return static_cast<const T*>(t.as<T>()); };
    cpu::attention_block_backward(s, blk, in(qkv), in(kv), in(out), lse.as<T>(), in(dout),
                                  dqkv.as<T>(), dkv.as<T>(), workspace_);
  });
}

}  // namespace kintsugi::cpu
