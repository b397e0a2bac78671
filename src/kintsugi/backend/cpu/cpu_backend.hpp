#pragma once
// CpuBackend: the ops' implementations on the CPU (DeviceBackend). Backend's entry points have
// checked the shapes (backend/ops_*.cpp); each implementation checks the element types, then
// hands raw pointers to the kernels: the templated ones when every tensor of the op is f32
// (training without mixed precision) or every one is f64 (gradient checks), the mixed-precision
// ones for any other mix of f32, bf16 and f16 (see backend.hpp). Each op's `do_<op>` is defined
// in the file of its kernels (layernorm.cpp, attention.cpp, ...), so that an op is one file;
// cpu_backend.cpp has what they share.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/gemm_mixed.hpp"
#include "kintsugi/backend/cpu/staging.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"
#include "kintsugi/core/cpu_info.hpp"

namespace kintsugi::cpu {

class CpuBackend final : public DeviceBackend {
 public:
  explicit CpuBackend(MemoryTracker& memory)
      : DeviceBackend(memory),
        workspace_(memory),
        gemm_(memory),
        index_(memory),
        partials_(memory),
        losses_(memory),
        moe_staging_(memory) {}
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  std::string hardware() const override { return cpu_model_name(); }
  Allocator& allocator() override { return host_allocator(); }
  void synchronize() override {}  // every op has finished when it returns

 private:
  // The ops, each defined in the file of its kernels:
  // linear.cpp
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                         bool accumulate) override;
  void do_linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                bool accumulate) override;
  void do_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                 const Tensor* db, bool accumulate) override;

  // layernorm.cpp
  void do_layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, double eps) override;
  void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                             const Tensor& db, bool accumulate) override;

  // rmsnorm.cpp
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                          double eps) override;
  void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw, bool accumulate) override;

  // swiglu.cpp
  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) override;
  void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup) override;

  // rope.cpp
  void do_rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table,
               bool inverse) override;

  // qk_norm.cpp
  void do_qk_norm_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& q_weight,
                          const Tensor& k_weight, const Tensor& rstd, double eps) override;
  void do_qk_norm_backward(const AttentionShape& s, const Tensor& pre, const Tensor& q_weight,
                           const Tensor& k_weight, const Tensor& rstd, const Tensor& d_qkv,
                           const Tensor& dq_weight, const Tensor& dk_weight) override;

  // gelu.cpp
  void do_gelu_forward(const Tensor& x, const Tensor& y) override;
  void do_gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void do_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                              const Tensor& pre, const Tensor& y) override;
  void do_linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                     const Tensor& dx) override;

  // attention.cpp
  void do_attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse) override;
  void do_attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override;

  // attention_block.cpp
  void do_attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                                  const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                  const Tensor& lse, bool merge) override;
  void do_attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                   const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                   const Tensor& lse, const Tensor& dout, const Tensor& dqkv,
                                   const Tensor& dkv) override;

  // attention_decode.cpp
  void do_attention_decode(const AttentionShape& s, const Tensor& cache, std::int64_t position,
                           const Tensor& out) override;

  // embedding.cpp
  void do_embedding_forward(const Tensor& token_ids, const Tensor& wte, const Tensor& out,
                            std::int64_t vocab_begin) override;
  void do_embedding_backward(const Tensor& token_ids, const Tensor& dout, const Tensor& dwte,
                             bool accumulate, std::int64_t vocab_begin) override;
  void do_position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                     std::int64_t first_row) override;
  void do_position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                      bool accumulate, std::int64_t first_row) override;

  // cross_entropy.cpp
  void do_softmax_row_max(const Tensor& logits, std::int64_t valid,
                          const Tensor& row_max) override;
  void do_softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                          const Tensor& target_ids, std::int64_t col_begin,
                          const Tensor& row_sum, const Tensor& target_logit,
                          bool store_exp) override;
  void do_cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                               const Tensor& row_sum, const Tensor& target_logit,
                               const Tensor& target_ids, std::int64_t col_begin,
                               const Tensor& loss_sum, bool backward, double grad_scale) override;

  // cross_entropy_fused.cpp
  void do_cross_entropy_fused(const Tensor& logits, std::int64_t valid, const Tensor& target_ids,
                              const Tensor& loss_sum, bool backward, double grad_scale) override;

  // moe.cpp
  void do_moe_route(const Tensor& logits, const MoeRouting& routing, const Tensor* bias,
                    const Tensor& probs, const Tensor& lse, const Tensor& experts,
                    const Tensor& gates, const Tensor& losses) override;
  void do_moe_route_backward(const Tensor& probs, const Tensor& lse, const Tensor& experts,
                             const Tensor& gates, const Tensor& d_gates,
                             const MoeRouting& routing, double aux_scale, double z_scale,
                             const Tensor& d_logits) override;
  void do_moe_dispatch(const Tensor& experts, const Tensor& order, const Tensor& position,
                       const Tensor& counts) override;
  void do_moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp) override;
  void do_moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                      const Tensor& out, bool accumulate) override;
  void do_moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                               const Tensor& position, const Tensor& weights, const Tensor& d_src,
                               const Tensor& d_weights) override;
  void do_moe_shared_gate(const Tensor& logit, const Tensor& shared, const Tensor& out) override;
  void do_moe_shared_gate_backward(const Tensor& logit, const Tensor& shared, const Tensor& dy,
                                   const Tensor& d_shared, const Tensor& d_logit) override;

  // elementwise.cpp
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void do_add_bias(const Tensor& x, const Tensor& bias) override;
  void do_scale(const Tensor& x, double factor) override;
  void do_copy(const Tensor& src, const Tensor& dst) override;
  void do_copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                       std::int64_t dst_col, std::int64_t cols) override;
  void do_zero(const Tensor& x) override;
  void do_sum_squares(const Tensor& x, const Tensor& sum) override;

  // multi_tensor.cpp
  void do_sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) override;

  // convert.cpp
  void do_convert(const Tensor& src, const Tensor& dst) override;

  // elementwise.cpp
  void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamWHyper& h, const Tensor* working_copy) override;

  // multi_tensor.cpp
  void do_adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) override;

  // lion.cpp
  void do_lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const LionHyper& h,
                    const Tensor* working_copy) override;

  enum class Kind { f32, f64, mixed };

  // The kernels an op's tensors call for (null entries are absent optional tensors).
  static Kind kind_of(std::initializer_list<const Tensor*> tensors);
  static Kind kind_of(std::span<const Tensor* const> tensors);
  // moe.cpp: a tensor of a MoE op and whether the op reads it, writes it, or both.
  enum class Use { in, out, in_out };
  struct MoeTensor {
    const Tensor* tensor;  // null: an optional tensor not given
    Use use;
  };
  // Calls fn.template operator()<T>(view) with view(t) the tensor t as T: with every float
  // tensor f32 (or f64), T = float (double) and t itself; with mixed precision, T = float and an
  // f32 copy of t in moe_staging_, widened first where the op reads it and rounded back into t
  // afterwards where it writes it.
  template <class Fn>
  void moe_typed(std::initializer_list<MoeTensor> tensors, Fn&& fn);
  // adamw_step's types: which kernel it takes.
  static Kind check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const Tensor* working_copy);

  // Calls fn.template operator()<T>() with T = float or double.
  template <class Fn>
  static void typed(Kind kind, Fn&& fn) {
    if (kind == Kind::f64)
      fn.template operator()<double>();
    else
      fn.template operator()<float>();
  }

  static std::int64_t cols_of(const Tensor& t) { return t.shape[t.shape.rank - 1]; }
  static std::int64_t rows_of(const Tensor& t) { return t.numel() / cols_of(t); }

  // Token ids and targets (i32, at least one per row: checked by the op's entry point).
  static const std::int32_t* ids(const Tensor& t) { return t.as<std::int32_t>(); }

  template <class T>
  static T* ptr(const Tensor* t) {
    return t ? t->as<T>() : nullptr;
  }

  // An optional tensor as the mixed kernels take it.
  struct OptionalAny {
    AnyPtr value;
    const AnyPtr* ptr = nullptr;
    explicit OptionalAny(const Tensor* t) {
      if (t) {
        value = AnyPtr(*t);
        ptr = &value;
      }
    }
  };

  // The f64 [1] a reduction adds to (checked by the op's entry point).
  static void add_to_scalar(const Tensor& scalar, double value) { *scalar.as<double>() += value; }

  ThreadWorkspace workspace_;  // per-thread rows and blocks
  GemmWorkspace gemm_;         // mixed-precision GEMM operands and results
  GrowBuffer index_;           // embedding rows grouped by token
  GrowBuffer partials_;        // sum_squares(_multi) chunk sums
  GrowBuffer losses_;          // cross_entropy_finish: each row's loss, summed in order
  GrowBuffer moe_staging_;     // moe.cpp: mixed precision's f32 copies of the ops' tensors
};

}  // namespace kintsugi::cpu
