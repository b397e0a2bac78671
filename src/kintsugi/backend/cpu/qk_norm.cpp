// Per-head RMSNorm of the queries and keys of the packed qkv tensor (Qwen3's q_norm and k_norm,
// backend.hpp): a row is, per kv head, its group of query heads, its key and its value, each
// head_dim wide (AttentionShape); the query and key heads are normalized in place and the values
// left alone. Forward and the input gradient run rows in parallel; the weights' gradients run
// their columns in parallel, each summing rows in order and the heads of a row in order, so the
// results do not depend on the thread count. The row bodies serve the typed and the
// mixed-precision kernels alike.
#include <algorithm>
#include <cmath>

#include "kintsugi/backend/cpu/cpu_backend.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/thread_rows.hpp"

namespace kintsugi::cpu {

namespace {

std::int64_t qk_row_width(const AttentionShape& s) {
  return s.kv_heads * (s.heads / s.kv_heads + 2) * s.head_dim;
}

// Calls f(j, offset, is_query) for the row's query and key heads in order: j counts them (rstd's
// column), offset is the head's first element in the row.
template <class F>
void for_qk_heads(const AttentionShape& s, F&& f) {
  const std::int64_t group = s.heads / s.kv_heads, slots = group + 2;
  std::int64_t j = 0;
  for (std::int64_t kv = 0; kv < s.kv_heads; ++kv)
    for (std::int64_t slot = 0; slot <= group; ++slot)
      f(j++, (kv * slots + slot) * s.head_dim, slot < group);
}

// Normalizes one row in place; put(j, rstd) keeps head j's rstd.
template <class T, class Put>
void qk_forward_row(const AttentionShape& s, T* row, const T* wq, const T* wk, double eps, Put&& put) {
  const std::int64_t hd = s.head_dim;
  for_qk_heads(s, [&](std::int64_t j, std::int64_t at, bool query) {
    T* x = row + at;
    const T* w = query ? wq : wk;
    T sq = 0;
    for (std::int64_t c = 0; c < hd; ++c) sq += x[c] * x[c];
    const T rs = T(1) / std::sqrt(sq / T(hd) + T(eps));
    for (std::int64_t c = 0; c < hd; ++c) x[c] = x[c] * rs * w[c];
    put(j, rs);
  });
}

// d_row's query and key heads: dy in, dx out, dx = rs * (dn - n * mean(dn * n)) with
// n = pre * rs and dn = dy * w.
template <class T, class Get>
void qk_backward_row(const AttentionShape& s, const T* pre, T* d_row, const T* wq, const T* wk,
                  Get&& rstd) {
  const std::int64_t hd = s.head_dim;
  for_qk_heads(s, [&](std::int64_t j, std::int64_t at, bool query) {
    const T* x = pre + at;
    T* d = d_row + at;
    const T* w = query ? wq : wk;
    const T rs = rstd(j);
    T sum = 0;
    for (std::int64_t c = 0; c < hd; ++c) sum += d[c] * w[c] * x[c] * rs;
    const T mean = sum / T(hd);
    for (std::int64_t c = 0; c < hd; ++c) d[c] = rs * (d[c] * w[c] - x[c] * rs * mean);
  });
}

// The weights' gradients, accumulated: column c of the query weight (k = 0) or the key weight
// (k = 1) sums dy * pre * rs over the rows in order, then over the row's heads of its kind in
// order. pre(i), dy(i) and rstd(i) read elements; acc(k, c) reads and store(k, c, v) writes the
// gradient. Must run before qk_backward_row overwrites dy.
template <class T, class Pre, class Dy, class Rstd, class Acc, class Store>
void qk_weight_grads(const AttentionShape& s, Pre&& pre, Dy&& dy, Rstd&& rstd, Acc&& acc,
                  Store&& store) {
  const std::int64_t hd = s.head_dim, rows = s.batch * s.seq, width = qk_row_width(s),
                     per_row = s.heads + s.kv_heads;
#pragma omp parallel for schedule(static)
  for (std::int64_t kc = 0; kc < 2 * hd; ++kc) {
    const std::int64_t k = kc / hd, c = kc % hd;
    T sum = acc(k, c);
    for (std::int64_t r = 0; r < rows; ++r)
      for_qk_heads(s, [&](std::int64_t j, std::int64_t at, bool query) {
        if (query != (k == 0)) return;
        const std::int64_t i = r * width + at + c;
        sum += dy(i) * pre(i) * rstd(r * per_row + j);
      });
    store(k, c, sum);
  }
}

}  // namespace

template <class T>
void qk_norm_forward(const AttentionShape& s, T* qkv, const T* wq, const T* wk, T* rstd,
                     double eps) {
  const std::int64_t width = qk_row_width(s), per_row = s.heads + s.kv_heads;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < s.batch * s.seq; ++r)
    qk_forward_row(s, qkv + r * width, wq, wk, eps,
                [&](std::int64_t j, T rs) { rstd[r * per_row + j] = rs; });
}

template <class T>
void qk_norm_backward(const AttentionShape& s, const T* pre, const T* wq, const T* wk,
                      const T* rstd, T* d_qkv, T* dwq, T* dwk) {
  const std::int64_t width = qk_row_width(s), per_row = s.heads + s.kv_heads;
  qk_weight_grads<T>(
      s, [&](std::int64_t i) { return pre[i]; }, [&](std::int64_t i) { return d_qkv[i]; },
      [&](std::int64_t i) { return rstd[i]; },
      [&](std::int64_t k, std::int64_t c) { return (k == 0 ? dwq : dwk)[c]; },
      [&](std::int64_t k, std::int64_t c, T v) { (k == 0 ? dwq : dwk)[c] = v; });
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < s.batch * s.seq; ++r)
    qk_backward_row(s, pre + r * width, d_qkv + r * width, wq, wk,
                 [&](std::int64_t j) { return rstd[r * per_row + j]; });
}

namespace mixed {

void qk_norm_forward(const AttentionShape& s, AnyPtr qkv, AnyPtr wq, AnyPtr wk, AnyPtr rstd,
                     double eps, ThreadWorkspace& ws) {
  const std::int64_t width = qk_row_width(s), hd = s.head_dim, per_row = s.heads + s.kv_heads;
  rows_with_thread_area(ws, width + 2 * hd, s.batch * s.seq, [&](float* area) {
    const float* wq32 = read_f32(wq, hd, area + width);
    const float* wk32 = read_f32(wk, hd, area + width + hd);
    return [&, area, wq32, wk32](std::int64_t r) {
      float* row = out_f32(qkv.at(r * width), width, area, true);
      qk_forward_row(s, row, wq32, wk32, eps,
                  [&](std::int64_t j, float rs) { rstd.set(r * per_row + j, rs); });
      write_back(qkv.at(r * width), width, row);
    };
  });
}

void qk_norm_backward(const AttentionShape& s, AnyPtr pre, AnyPtr wq, AnyPtr wk, AnyPtr rstd,
                      AnyPtr d_qkv, AnyPtr dwq, AnyPtr dwk, ThreadWorkspace& ws) {
  const std::int64_t width = qk_row_width(s), hd = s.head_dim, per_row = s.heads + s.kv_heads;
  qk_weight_grads<float>(
      s, [&](std::int64_t i) { return pre.get(i); }, [&](std::int64_t i) { return d_qkv.get(i); },
      [&](std::int64_t i) { return rstd.get(i); },
      [&](std::int64_t k, std::int64_t c) { return (k == 0 ? dwq : dwk).get(c); },
      [&](std::int64_t k, std::int64_t c, float v) { (k == 0 ? dwq : dwk).set(c, v); });
  rows_with_thread_area(ws, 2 * width + 2 * hd, s.batch * s.seq, [&](float* area) {
    const float* wq32 = read_f32(wq, hd, area + 2 * width);
    const float* wk32 = read_f32(wk, hd, area + 2 * width + hd);
    return [&, area, wq32, wk32](std::int64_t r) {
      const float* x = read_f32(pre.at(r * width), width, area);
      float* d = out_f32(d_qkv.at(r * width), width, area + width, true);
      qk_backward_row(s, x, d, wq32, wk32, [&](std::int64_t j) { return rstd.get(r * per_row + j); });
      write_back(d_qkv.at(r * width), width, d);
    };
  });
}

}  // namespace mixed

// ---- CpuBackend's overrides (cpu_backend.hpp): check the element types, then call a kernel

void CpuBackend::do_qk_norm_forward(const AttentionShape& s, const Tensor& qkv,
                                    const Tensor& q_weight, const Tensor& k_weight,
                                    const Tensor& rstd, double eps) {
  const Kind kind = kind_of({&qkv, &q_weight, &k_weight, &rstd});
  if (kind == Kind::mixed)
    return mixed::qk_norm_forward(s, AnyPtr(qkv), AnyPtr(q_weight), AnyPtr(k_weight),
                                  AnyPtr(rstd), eps, workspace_);
  typed(kind, [&]<class T>() {
    cpu::qk_norm_forward(s, qkv.as<T>(), q_weight.as<T>(), k_weight.as<T>(), rstd.as<T>(), eps);
  });
}

void CpuBackend::do_qk_norm_backward(const AttentionShape& s, const Tensor& pre,
                                     const Tensor& q_weight, const Tensor& k_weight,
                                     const Tensor& rstd, const Tensor& d_qkv,
                                     const Tensor& dq_weight, const Tensor& dk_weight) {
  const Kind kind = kind_of({&pre, &q_weight, &k_weight, &rstd, &d_qkv, &dq_weight, &dk_weight});
  if (kind == Kind::mixed)
    return mixed::qk_norm_backward(s, AnyPtr(pre), AnyPtr(q_weight), AnyPtr(k_weight),
                                   AnyPtr(rstd), AnyPtr(d_qkv), AnyPtr(dq_weight),
                                   AnyPtr(dk_weight), workspace_);
  typed(kind, [&]<class T>() {
    cpu::qk_norm_backward(s, pre.as<T>(), q_weight.as<T>(), k_weight.as<T>(), rstd.as<T>(),
                          d_qkv.as<T>(), dq_weight.as<T>(), dk_weight.as<T>());
  });
}

}  // namespace kintsugi::cpu
