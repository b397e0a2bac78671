// Per-head RMSNorm of the packed qkv tensor's queries and keys (Qwen3's q_norm and k_norm; the
// contract is backend.hpp's qk_norm_forward and qk_norm_backward). One thread per (row, query or
// key head) for the forward pass and the input gradient, looping over head_dim; the weights'
// gradients one thread per (weight, column), summing the rows in order and the heads of a row in
// order as the CPU kernel does (backend/cpu/qk_norm.cpp). Heads are a few hundred elements at
// most, so a thread's loop is short; the norm is a small part of a block's time.
#include "kintsugi/backend/cuda/device_math.cuh"

namespace kintsugi::cuda {

namespace {

// Head j (of heads + kv_heads per row: per kv head its group of queries, then its key): its
// first element in the row, and whether it is a query.
__device__ __forceinline__ std::int64_t qk_head_offset(const AttnShape& s, std::int64_t j,
                                                       bool* query) {
  const std::int64_t group = s.heads / s.kv_heads, kv = j / (group + 1), slot = j % (group + 1);
  *query = slot < group;
  return (kv * (group + 2) + slot) * s.head_dim;
}

// The grid-stride loop of the forward and input-gradient kernels over (row, head) items:
// f(idx, at, w) with the head's first element in qkv and its weight.
template <class F>
__device__ __forceinline__ void for_qk_items(const AttnShape& s, const Ref& wq, const Ref& wk,
                                             F&& f) {
  const std::int64_t per_row = s.heads + s.kv_heads, n = s.batch * s.seq * per_row;
  for (std::int64_t idx = global_index(); idx < n; idx += global_stride()) {
    bool query = false;
    const std::int64_t at = idx / per_row * (s.heads + 2 * s.kv_heads) * s.head_dim +
                            qk_head_offset(s, idx % per_row, &query);
    f(idx, at, query ? wq : wk);
  }
}

template <class Acc>
__global__ void qk_norm_forward_kernel(AttnShape s, Ref qkv, Ref wq, Ref wk, Ref rstd, double eps) {
  const std::int64_t hd = s.head_dim;
  for_qk_items(s, wq, wk, [&](std::int64_t idx, std::int64_t at, const Ref& w) {
    Acc sq = 0;
    for (std::int64_t c = 0; c < hd; ++c) {
      const Acc x = load<Acc>(qkv, at + c);
      sq += x * x;
    }
    const Acc rs = Acc(1) / sqrt(sq / Acc(hd) + Acc(eps));
    for (std::int64_t c = 0; c < hd; ++c) store(qkv, at + c, load<Acc>(qkv, at + c) * rs * load<Acc>(w, c));
    store(rstd, idx, rs);
  });
}

// Accumulates dq_weight (k = 0) and dk_weight (k = 1); runs before the input gradient
// overwrites d_qkv.
template <class Acc>
__global__ void qk_norm_weight_kernel(AttnShape s, Ref pre, Ref rstd, Ref d_qkv, Ref dwq, Ref dwk) {
  const std::int64_t per_row = s.heads + s.kv_heads, hd = s.head_dim;
  const std::int64_t width = (s.heads + 2 * s.kv_heads) * hd, rows = s.batch * s.seq;
  for (std::int64_t idx = global_index(); idx < 2 * hd; idx += global_stride()) {
    const std::int64_t k = idx / hd, c = idx % hd;
    const Ref& dw = k == 0 ? dwq : dwk;
    Acc sum = load<Acc>(dw, c);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < per_row; ++j) {
        bool query = false;
        const std::int64_t i = r * width + qk_head_offset(s, j, &query) + c;
        if (query != (k == 0)) continue;
        sum += load<Acc>(d_qkv, i) * load<Acc>(pre, i) * load<Acc>(rstd, r * per_row + j);
      }
    store(dw, c, sum);
  }
}

template <class Acc>
__global__ void qk_norm_input_kernel(AttnShape s, Ref pre, Ref wq, Ref wk, Ref rstd, Ref d_qkv) {
  const std::int64_t hd = s.head_dim;
  for_qk_items(s, wq, wk, [&](std::int64_t idx, std::int64_t at, const Ref& w) {
    const Acc rs = load<Acc>(rstd, idx);
    Acc sum = 0;
    for (std::int64_t c = 0; c < hd; ++c)
      sum += load<Acc>(d_qkv, at + c) * load<Acc>(w, c) * load<Acc>(pre, at + c) * rs;
    const Acc mean = sum / Acc(hd);
    for (std::int64_t c = 0; c < hd; ++c) {
      const Acc dn = load<Acc>(d_qkv, at + c) * load<Acc>(w, c);
      store(d_qkv, at + c, rs * (dn - load<Acc>(pre, at + c) * rs * mean));
    }
  });
}

}  // namespace

void qk_norm_forward(const AttnShape& s, Ref qkv, Ref wq, Ref wk, Ref rstd, double eps,
                     cudaStream_t stream) {
  const std::int64_t n = s.batch * s.seq * (s.heads + s.kv_heads);
  if (n <= 0) return;
  with_acc({qkv, wq, wk, rstd}, [&](auto acc) {
    auto* kernel = qk_norm_forward_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(kernel, grid_for(n), kThreads, 0, stream, s, qkv, wq, wk, rstd, eps);
    check_launch("qk_norm_forward_kernel", stream);
  });
}

void qk_norm_backward(const AttnShape& s, Ref pre, Ref wq, Ref wk, Ref rstd, Ref d_qkv, Ref dwq,
                      Ref dwk, cudaStream_t stream) {
  const std::int64_t n = s.batch * s.seq * (s.heads + s.kv_heads);
  if (n <= 0) return;
  with_acc({pre, wq, wk, rstd, d_qkv, dwq, dwk}, [&](auto acc) {
    auto* weights = qk_norm_weight_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(weights, grid_for(2 * s.head_dim), kThreads, 0, stream, s, pre, rstd,
                         d_qkv, dwq, dwk);
    check_launch("qk_norm_weight_kernel", stream);
    auto* input = qk_norm_input_kernel<decltype(acc)>;
    KINTSUGI_CUDA_LAUNCH(input, grid_for(n), kThreads, 0, stream, s, pre, wq, wk, rstd, d_qkv);
    check_launch("qk_norm_input_kernel", stream);
  });
}

}  // namespace kintsugi::cuda
