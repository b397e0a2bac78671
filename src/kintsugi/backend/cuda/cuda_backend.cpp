// CudaBackend: the ops' implementations on one GPU (DeviceBackend). Backend's entry points have
// checked the shapes (backend/ops_*.cpp); each implementation checks the element types, the
// devices and the GPU's own limits, then enqueues the kernels of kernels.hpp on the context's
// stream. Nothing here waits for the GPU
// except synchronize() and the allocator's copies.
#include "kintsugi/backend/cuda/cuda_backend.hpp"

#include <cmath>
#include <initializer_list>
#include <vector>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/backend/cuda/device_allocator.hpp"
#include "kintsugi/backend/cuda/device_tables.hpp"
#include "kintsugi/backend/cuda/gemm.hpp"
#include "kintsugi/backend/cuda/kernels.hpp"
#include "kintsugi/backend/cuda/stream_timeline.hpp"

namespace kintsugi {

namespace {

using cuda::Ref;

std::int64_t cols_of(const Tensor& t) {
  KINTSUGI_ASSERT(t.shape.rank > 0);
  return t.shape[t.shape.rank - 1];
}
std::int64_t rows_of(const Tensor& t) { return t.numel() / cols_of(t); }

// Float tensors of one op: all f64, or any mix of f32, bf16 and f16 (backend.hpp).
void check_types(std::initializer_list<const Tensor*> tensors) {
  bool any_f64 = false, all_f64 = true;
  for (const Tensor* t : tensors) {
    if (!t) continue;
    if (!is_float(t->dtype))
      fail("the CUDA backend's float ops do not take {} tensors", name_of(t->dtype));
    KINTSUGI_ASSERT(t->device == Device::cuda);  // every tensor of an op lives on the GPU
    any_f64 |= t->dtype == DType::f64;
    all_f64 &= t->dtype == DType::f64;
  }
  if (any_f64 && !all_f64)
    fail(
        "f64 tensors cannot be mixed with other types in one op (f64 serves gradient checks, "
        "where every tensor is f64)");
}

Ref ref(const Tensor& t) { return Ref{t.data, t.dtype, t.numel()}; }
Ref ref(const Tensor* t) { return t ? ref(*t) : Ref{}; }

// Token ids and targets (i32, at least one per row: checked by the op's entry point).
const std::int32_t* ids(const Tensor& t) {
  KINTSUGI_ASSERT(t.device == Device::cuda);
  return static_cast<const std::int32_t*>(t.data);
}

cuda::AttnShape attn_shape(const AttentionShape& s) {
  return {s.batch,    s.seq,         s.heads,      s.kv_heads,       s.head_dim,
          s.alibi_heads, s.head_begin, s.first_position, s.doc_start, s.window};
}

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(MemoryTracker& memory)
      : DeviceBackend(memory),
        context_(cuda::Context::get()),
        stream_(context_.stream()),
        gemm_(cuda::device_allocator(), memory),
        scratch_(cuda::device_allocator(), memory),
        tables_(cuda::device_allocator(), memory),
        timeline_(stream_) {
    register_allocator(cuda::device_allocator());
  }
  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device::cuda; }
  std::string hardware() const override { return context_.device_name(); }
  Allocator& allocator() override { return cuda::device_allocator(); }
  void synchronize() override { cuda::check(cudaStreamSynchronize(stream_), "synchronize"); }
  DeviceTimeline* timeline() override { return &timeline_; }

 private:
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                         bool accumulate) override {
    const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
    check_types({&x, &w, bias, &y});
    gemm_.run(m, n, k, ref(x), false, ref(w), true, ref(y), accumulate, ref(bias), stream_);
  }
  void do_linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
    check_types({&dy, &w, &dx});
    gemm_.run(m, k, n, ref(dy), false, ref(w), false, ref(dx), accumulate, Ref{}, stream_);
  }
  void do_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                 const Tensor* db, bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = cols_of(x);
    check_types({&dy, &x, &dw, db});
    // db: the column sums of dy, in the GEMM's epilogue where cuBLASLt takes it (gemm.hpp).
    gemm_.run(n, k, m, ref(dy), true, ref(x), false, ref(dw), accumulate,
              cuda::GemmEpilogue{.row_sums = ref(db)}, stream_);
  }

  void do_layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, double eps) override {
    check_types({&x, &w, &b, &y, &mean, &rstd});
    cuda::layernorm_forward(ref(x), ref(w), ref(b), ref(y), ref(mean), ref(rstd), rows_of(x),
                            cols_of(x), eps, stream_);
  }
  void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                             const Tensor& db, bool accumulate) override {
    const std::int64_t rows = rows_of(x), cols = cols_of(x);
    check_types({&dy, &x, &w, &mean, &rstd, &dx, &dw, &db});
    cuda::layernorm_backward(ref(dy), ref(x), ref(w), ref(mean), ref(rstd), ref(dx), ref(dw),
                             ref(db), rows, cols, accumulate,
                             scratch(cuda::norm_backward_scratch_bytes(rows, cols)), stream_);
  }

  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                          double eps) override {
    check_types({&x, &w, &y, &rstd});
    cuda::rmsnorm_forward(ref(x), ref(w), ref(y), ref(rstd), rows_of(x), cols_of(x), eps, stream_);
  }
  void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw, bool accumulate) override {
    const std::int64_t rows = rows_of(x), cols = cols_of(x);
    check_types({&dy, &x, &w, &rstd, &dx, &dw});
    cuda::rmsnorm_backward(ref(dy), ref(x), ref(w), ref(rstd), ref(dx), ref(dw), rows, cols,
                           accumulate, scratch(cuda::norm_backward_scratch_bytes(rows, cols)),
                           stream_);
  }

  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) override {
    check_types({&gate, &up, &y});
    cuda::swiglu_forward(ref(gate), ref(up), ref(y), y.numel(), stream_);
  }
  void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup) override {
    const std::int64_t n = gate.numel();
    check_types({&gate, &up, &dy, &dgate, &dup});
    cuda::swiglu_backward(ref(gate), ref(up), ref(dy), ref(dgate), ref(dup), n, stream_);
  }

  void do_rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table,
               bool inverse) override {
    check_types({&qkv});
    // The table is uploaded once and found again by its bytes (every block shares it).
    const auto* inv_freq = static_cast<const double*>(
        tables_.device_copy(table.inv_freq.data(), table.inv_freq.size() * sizeof(double)));
    cuda::rope(attn_shape(s), ref(qkv), inv_freq, table.scale, inverse, stream_);
  }

  void do_qk_norm_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& q_weight,
                          const Tensor& k_weight, const Tensor& rstd, double eps) override {
    check_types({&qkv, &q_weight, &k_weight, &rstd});
    cuda::qk_norm_forward(attn_shape(s), ref(qkv), ref(q_weight), ref(k_weight), ref(rstd), eps,
                          stream_);
  }
  void do_qk_norm_backward(const AttentionShape& s, const Tensor& pre, const Tensor& q_weight,
                           const Tensor& k_weight, const Tensor& rstd, const Tensor& d_qkv,
                           const Tensor& dq_weight, const Tensor& dk_weight) override {
    check_types({&pre, &q_weight, &k_weight, &rstd, &d_qkv, &dq_weight, &dk_weight});
    cuda::qk_norm_backward(attn_shape(s), ref(pre), ref(q_weight), ref(k_weight), ref(rstd),
                           ref(d_qkv), ref(dq_weight), ref(dk_weight), stream_);
  }

  void do_gelu_forward(const Tensor& x, const Tensor& y) override {
    check_types({&x, &y});
    cuda::gelu_forward(ref(x), ref(y), x.numel(), stream_);
  }
  void do_gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    check_types({&x, &dy, &dx});
    cuda::gelu_backward(ref(x), ref(dy), ref(dx), x.numel(), stream_);
  }
  // The GELU in the GEMM's epilogue where cuBLASLt takes it (gemm.hpp).
  void do_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                              const Tensor& pre, const Tensor& y) override {
    const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
    check_types({&x, &w, bias, &pre, &y});
    gemm_.run(m, n, k, ref(x), false, ref(w), true, ref(y), false,
              {.bias = ref(bias), .gelu = cuda::GemmEpilogue::Gelu::forward, .gelu_input = ref(pre)},
              stream_);
  }
  void do_linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                     const Tensor& dx) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
    check_types({&dy, &w, &pre, &dx});
    gemm_.run(m, k, n, ref(dy), false, ref(w), false, ref(dx), false,
              {.gelu = cuda::GemmEpilogue::Gelu::backward, .gelu_input = ref(pre)}, stream_);
  }

  void do_attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse) override {
    check_head_dim(s);
    check_types({&qkv, &out, &lse});
    cuda::attention_forward(attn_shape(s), ref(qkv), ref(out), ref(lse), stream_);
  }
  void do_attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override {
    check_head_dim(s);
    check_types({&qkv, &out, &lse, &dout, &dqkv});
    const cuda::AttnShape a = attn_shape(s);
    cuda::attention_backward(a, ref(qkv), ref(out), ref(lse), ref(dout), ref(dqkv),
                             scratch(cuda::attention_backward_scratch_bytes(a, lse.dtype)),
                             stream_);
  }
  // Ring attention's blocks (attention_block.cu; docs/parallelism.md, "Ring exchange").
  static cuda::AttnBlock attn_block(const AttentionBlock& b) {
    return {b.rows, b.q_begin, b.q_count, b.q_position, b.k_begin, b.k_count, b.k_position};
  }
  void do_attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                                  const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                  const Tensor& lse, bool merge) override {
    check_head_dim(s);
    check_types({&qkv, &kv, &out, &lse});
    cuda::attention_block_forward(attn_shape(s), attn_block(blk), ref(qkv), ref(kv), ref(out),
                                  ref(lse), merge, stream_);
  }
  void do_attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                   const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                   const Tensor& lse, const Tensor& dout, const Tensor& dqkv,
                                   const Tensor& dkv) override {
    check_head_dim(s);
    check_types({&qkv, &kv, &out, &lse, &dout, &dqkv, &dkv});
    cuda::attention_block_backward(attn_shape(s), attn_block(blk), ref(qkv), ref(kv), ref(out),
                                   ref(lse), ref(dout), ref(dqkv), ref(dkv), stream_);
  }
  void do_attention_decode(const AttentionShape& s, const Tensor& cache, std::int64_t position,
                           const Tensor& out) override {
    KINTSUGI_ASSERT(!s.doc_start);  // the decode kernel takes one document per sequence
    check_types({&cache, &out});
    const cuda::AttnShape a = attn_shape(s);
    cuda::attention_decode(a, ref(cache), position, ref(out),
                           scratch(cuda::attention_decode_scratch_bytes(a, position, cache.dtype)),
                           stream_);
  }

  void do_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& out,
                            std::int64_t vocab_begin) override {
    check_types({&wte, &out});
    cuda::embedding_forward(ids(tokens), rows_of(out), ref(wte), wte.shape[0],
                            ref(out), cols_of(wte), vocab_begin, stream_);
  }
  void do_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                             bool accumulate, std::int64_t vocab_begin) override {
    check_types({&dout, &dwte});
    const std::int64_t rows = rows_of(dout);
    if (rows > 0x7fffffff) fail("embedding backward takes at most 2^31 - 1 rows, not {}", rows);
    cuda::embedding_backward(ids(tokens), rows, ref(dout), ref(dwte), dwte.shape[0],
                             cols_of(dwte), accumulate, vocab_begin,
                             scratch(cuda::embedding_backward_scratch_bytes(rows)), stream_);
  }
  void do_position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                     std::int64_t first_row) override {
    check_types({&x, &wpe});
    cuda::position_embedding_forward(ref(x), rows_of(x), ref(wpe), cols_of(x), seq, first_row,
                                     stream_);
  }
  void do_position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                      bool accumulate, std::int64_t first_row) override {
    check_types({&dx, &dwpe});
    cuda::position_embedding_backward(ref(dx), rows_of(dx), ref(dwpe), dwpe.shape[0], cols_of(dx),
                                      seq, accumulate, first_row, stream_);
  }

  void do_softmax_row_max(const Tensor& logits, std::int64_t valid,
                          const Tensor& row_max) override {
    check_types({&logits, &row_max});
    cuda::softmax_row_max(ref(logits), rows_of(logits), cols_of(logits), valid, ref(row_max),
                          stream_);
  }
  void do_softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                          const Tensor& targets, std::int64_t col_begin, const Tensor& row_sum,
                          const Tensor& target_logit, bool store_exp) override {
    const std::int64_t rows = rows_of(logits);
    check_types({&logits, &row_max, &row_sum, &target_logit});
    cuda::softmax_row_sum(ref(logits), rows, cols_of(logits), valid, ref(row_max),
                          ids(targets), col_begin, ref(row_sum), ref(target_logit), store_exp,
                          stream_);
  }
  void do_cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                               const Tensor& row_sum, const Tensor& target_logit,
                               const Tensor& targets, std::int64_t col_begin,
                               const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits);
    KINTSUGI_ASSERT(loss_sum.device == Device::cuda);
    check_types({&logits, &row_max, &row_sum, &target_logit});
    cuda::cross_entropy_finish(ref(logits), rows, cols_of(logits), valid, ref(row_max),
                               ref(row_sum), ref(target_logit), ids(targets), col_begin,
                               static_cast<double*>(loss_sum.data), backward, grad_scale,
                               scratch(cuda::cross_entropy_scratch_bytes(rows)), stream_);
  }
  void do_cross_entropy_fused(const Tensor& logits, std::int64_t valid, const Tensor& targets,
                              const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits);
    KINTSUGI_ASSERT(loss_sum.device == Device::cuda);
    check_types({&logits});
    cuda::cross_entropy_fused(ref(logits), rows, cols_of(logits), valid, ids(targets),
                              static_cast<double*>(loss_sum.data), backward, grad_scale,
                              scratch(cuda::cross_entropy_scratch_bytes(rows)), stream_);
  }

  // Mixture of experts (moe.cu; docs/moe.md): any mix of float types, as the other ops.
  static std::int32_t* out_ids(const Tensor& t) {
    KINTSUGI_ASSERT(t.device == Device::cuda && t.dtype == DType::i32);
    return static_cast<std::int32_t*>(t.data);
  }
  void do_moe_route(const Tensor& logits, const MoeRouting& routing, const Tensor* bias,
                    const Tensor& probs, const Tensor& lse, const Tensor& experts,
                    const Tensor& gates, const Tensor& losses) override {
    check_types({&logits, &probs, &lse, &gates});
    KINTSUGI_ASSERT(losses.device == Device::cuda && losses.dtype == DType::f64);
    KINTSUGI_ASSERT(!bias || bias->device == Device::cuda);
    const std::int64_t e = cols_of(logits);
    cuda::moe_route(ref(logits), rows_of(logits), e, routing,
                    bias ? static_cast<const float*>(bias->data) : nullptr, ref(probs), ref(lse),
                    out_ids(experts), ref(gates), static_cast<double*>(losses.data),
                    scratch(cuda::moe_scratch_bytes(e, experts.numel())), stream_);
  }
  void do_moe_route_backward(const Tensor& probs, const Tensor& lse, const Tensor& experts,
                             const Tensor& gates, const Tensor& d_gates,
                             const MoeRouting& routing, double aux_scale, double z_scale,
                             const Tensor& d_logits) override {
    check_types({&probs, &lse, &gates, &d_gates, &d_logits});
    const std::int64_t n = rows_of(probs), e = cols_of(probs);
    cuda::moe_route_backward(ref(probs), ref(lse), ids(experts), ref(gates), ref(d_gates), n, e,
                             experts.numel() / n, routing, aux_scale, z_scale, ref(d_logits),
                             scratch(cuda::moe_scratch_bytes(e, experts.numel())), stream_);
  }
  void do_moe_dispatch(const Tensor& experts, const Tensor& order, const Tensor& position,
                       const Tensor& counts) override {
    const std::int64_t e = counts.numel();
    cuda::moe_dispatch(ids(experts), experts.numel(), e, out_ids(order), out_ids(position),
                       out_ids(counts), scratch(cuda::moe_scratch_bytes(e, experts.numel())),
                       stream_);
  }
  void do_moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp) override {
    check_types({&x, &xp});
    const std::int64_t m = rows_of(xp);
    cuda::moe_gather(ref(x), ids(order), m, m / rows_of(x), cols_of(x), ref(xp), stream_);
  }
  void do_moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                      const Tensor& out, bool accumulate) override {
    check_types({&src, weights, &out});
    const std::int64_t n = rows_of(out);
    cuda::moe_combine(ref(src), ids(position), ref(weights), n, rows_of(src) / n, cols_of(out),
                      ref(out), accumulate, stream_);
  }
  void do_moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                               const Tensor& position, const Tensor& weights, const Tensor& d_src,
                               const Tensor& d_weights) override {
    check_types({&dy, &src, &weights, &d_src, &d_weights});
    const std::int64_t n = rows_of(dy);
    cuda::moe_combine_backward(ref(dy), ref(src), ids(order), ids(position), ref(weights), n,
                               rows_of(src) / n, cols_of(dy), ref(d_src), ref(d_weights), stream_);
  }
  void do_moe_shared_gate(const Tensor& logit, const Tensor& shared, const Tensor& out) override {
    check_types({&logit, &shared, &out});
    cuda::moe_shared_gate(ref(logit), ref(shared), rows_of(out), cols_of(out), ref(out), stream_);
  }
  void do_moe_shared_gate_backward(const Tensor& logit, const Tensor& shared, const Tensor& dy,
                                   const Tensor& d_shared, const Tensor& d_logit) override {
    check_types({&logit, &shared, &dy, &d_shared, &d_logit});
    cuda::moe_shared_gate_backward(ref(logit), ref(shared), ref(dy), rows_of(dy), cols_of(dy),
                                   ref(d_shared), ref(d_logit), stream_);
  }

  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    check_types({&a, &b, &out});
    cuda::add(ref(a), ref(b), ref(out), a.numel(), stream_);
  }
  void do_add_bias(const Tensor& x, const Tensor& bias) override {
    check_types({&x, &bias});
    cuda::add_bias(ref(x), ref(bias), rows_of(x), cols_of(x), stream_);
  }
  void do_scale(const Tensor& x, double factor) override {
    check_types({&x});
    cuda::scale(ref(x), x.numel(), factor, stream_);
  }
  void do_copy(const Tensor& src, const Tensor& dst) override {
    KINTSUGI_ASSERT(src.device == Device::cuda && dst.device == Device::cuda);
    if (src.bytes() == 0 || src.data == dst.data) return;
    cuda::check(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream_),
                "cudaMemcpyAsync (copy)");
  }
  // One strided copy on the stream, no kernel: rows of `cols` elements, each tensor's own row
  // length apart.
  void do_copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                       std::int64_t dst_col, std::int64_t cols) override {
    KINTSUGI_ASSERT(src.device == Device::cuda && dst.device == Device::cuda);
    const auto bytes = [es = size_of(src.dtype)](std::int64_t n) {
      return static_cast<std::size_t>(n) * es;
    };
    if (cols == 0 || src.shape[0] == 0) return;
    cuda::check(cudaMemcpy2DAsync(static_cast<std::byte*>(dst.data) + bytes(dst_col),
                                  bytes(dst.shape[1]),
                                  static_cast<const std::byte*>(src.data) + bytes(src_col),
                                  bytes(src.shape[1]), bytes(cols),
                                  static_cast<std::size_t>(src.shape[0]), cudaMemcpyDeviceToDevice,
                                  stream_),
                "cudaMemcpy2DAsync (copy_columns)");
  }
  void do_convert(const Tensor& src, const Tensor& dst) override {
    if (src.dtype == dst.dtype) return do_copy(src, dst);
    KINTSUGI_ASSERT(src.device == Device::cuda && dst.device == Device::cuda);
    cuda::convert(ref(src), ref(dst), src.numel(), stream_);
  }
  void do_zero(const Tensor& x) override {
    KINTSUGI_ASSERT(x.device == Device::cuda);
    if (x.bytes() == 0) return;
    cuda::check(cudaMemsetAsync(x.data, 0, x.bytes(), stream_), "cudaMemsetAsync (zero)");
  }
  void do_sum_squares(const Tensor& x, const Tensor& sum) override {
    check_types({&x});
    KINTSUGI_ASSERT(sum.device == Device::cuda);
    cuda::sum_squares(ref(x), x.numel(), static_cast<double*>(sum.data),
                      scratch(cuda::sum_squares_scratch_bytes(x.numel())), stream_);
  }

  void do_sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) override {
    KINTSUGI_ASSERT(sum.device == Device::cuda);
    std::vector<Ref> refs;
    for (const Tensor& x : xs) {
      check_types({&x});
      refs.push_back(ref(x));
    }
    const auto count = static_cast<std::int64_t>(refs.size());
    const cuda::Scratch partials =
        scratch(cuda::sum_squares_multi_scratch_bytes(refs.data(), count));
    if (!cuda::sum_squares_multi(refs.data(), count, static_cast<double*>(sum.data), tables_,
                                 partials, stream_))
      for (const Tensor& x : xs) do_sum_squares(x, sum);  // a mix of types: range by range
  }

  void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamWHyper& h, const Tensor* working_copy) override {
    check_adamw(param, grad, m, v, working_copy);
    cuda::adamw_step(ref(param), ref(grad), ref(m), ref(v), ref(working_copy), param.numel(),
                     adamw_constants(h, h.weight_decay), stream_);
  }
  void do_adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) override {
    std::vector<cuda::AdamWRangeRef> refs;
    for (const AdamWRange& r : ranges) {
      const Tensor* copy = r.working_copy.empty() ? nullptr : &r.working_copy;
      check_adamw(r.param, r.grad, r.m, r.v, copy);
      refs.push_back({ref(r.param), ref(r.grad), ref(r.m), ref(r.v), ref(copy), r.decay});
    }
    if (cuda::adamw_step_multi(refs.data(), static_cast<std::int64_t>(refs.size()),
                               adamw_constants(h, h.weight_decay), adamw_constants(h, 0.0),
                               tables_, stream_))
      return;
    for (const AdamWRange& r : ranges) {  // a mix of types: range by range
      AdamWHyper hr = h;
      hr.weight_decay = r.decay ? h.weight_decay : 0.0;
      do_adamw_step(r.param, r.grad, r.m, r.v, hr,
                    r.working_copy.empty() ? nullptr : &r.working_copy);
    }
  }

  void do_lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const LionHyper& h,
                    const Tensor* working_copy) override {
    const std::int64_t n = param.numel();
    check_types({&param, &grad, &m, working_copy});
    if (param.dtype != DType::f64 && (param.dtype != DType::f32 || m.dtype != DType::f32))
      fail("Lion keeps param (the master copy) and m in f32, not {}/{}", name_of(param.dtype),
           name_of(m.dtype));
    cuda::lion_step(ref(param), ref(grad), ref(m), ref(working_copy), n,
                    {.b1 = h.beta1,
                     .b2 = h.beta2,
                     .grad_scale = h.grad_scale,
                     .lr = h.lr,
                     .decay = 1.0 - h.lr * h.weight_decay},
                    stream_);
  }

 private:
  static void check_head_dim(const AttentionShape& s) {
    if (s.head_dim > 256)
      fail("the CUDA attention kernels take heads of up to 256 dimensions, not {}", s.head_dim);
  }
  cuda::Scratch scratch(std::size_t bytes) { return scratch_.get(bytes); }
  // AdamW's types (its lengths are checked by the op's entry point).
  static void check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const Tensor* working_copy) {
    check_types({&param, &grad, &m, &v, working_copy});
    const bool f64 = param.dtype == DType::f64;
    if (!f64 && (param.dtype != DType::f32 || m.dtype != DType::f32 || v.dtype != DType::f32))
      fail("AdamW keeps param (the master copy), m and v in f32, not {}/{}/{}",
           name_of(param.dtype), name_of(m.dtype), name_of(v.dtype));
  }
  // The CPU backend's constants (backend/cpu/kernels.hpp), computed the same way.
  static cuda::AdamWConstants adamw_constants(const AdamWHyper& h, double weight_decay) {
    return {.b1 = h.beta1,
            .b2 = h.beta2,
            .grad_scale = h.grad_scale,
            .eps = h.eps,
            .decay = 1.0 - h.lr * weight_decay,
            .step_size = h.lr / (1.0 - std::pow(h.beta1, double(h.step))),
            .inv_sqrt_bc2 = 1.0 / std::sqrt(1.0 - std::pow(h.beta2, double(h.step)))};
  }

  cuda::Context& context_;
  cudaStream_t stream_;
  cuda::Gemm gemm_;
  cuda::DeviceScratch scratch_;  // per-op scratch (partial sums, sort buffers, row losses)
  cuda::DeviceTables tables_;    // the multi-range ops' tables of ranges
  cuda::StreamTimeline timeline_;  // traces: when the stream ran the traced spans
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(MemoryTracker& memory) {
  return std::make_unique<CudaBackend>(memory);
}

int cuda_device_count() { return cuda::device_count(); }

}  // namespace kintsugi
