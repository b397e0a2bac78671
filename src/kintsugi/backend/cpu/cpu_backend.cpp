// CpuBackend: the ops' implementations on the CPU (DeviceBackend). Backend's entry points have
// checked the shapes (backend/ops_*.cpp); each implementation checks the element types, then
// hands raw pointers to the kernels: the templated ones when every tensor of the op is f32
// (training without mixed precision) or every one is f64 (gradient checks), the mixed-precision
// ones for any other mix of f32, bf16 and f16 (see backend.hpp).
#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/gemm_mixed.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/lion.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"
#include "kintsugi/backend/cpu/multi_tensor.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"
#include "kintsugi/core/cpu_info.hpp"

namespace kintsugi {

namespace {

using cpu::AnyPtr;

enum class Kind { f32, f64, mixed };

// The kernels an op's tensors call for (null entries are absent optional tensors).
Kind kind_of(std::initializer_list<const Tensor*> tensors) {
  bool all_f32 = true, all_f64 = true, any_f64 = false;
  for (const Tensor* t : tensors) {
    if (!t) continue;
    all_f32 &= t->dtype == DType::f32;
    all_f64 &= t->dtype == DType::f64;
    any_f64 |= t->dtype == DType::f64;
    if (!is_float(t->dtype))
      fail("the CPU backend's float ops do not take {} tensors", name_of(t->dtype));
  }
  if (all_f32) return Kind::f32;
  if (all_f64) return Kind::f64;
  if (any_f64)
    fail("f64 tensors cannot be mixed with other types in one op (f64 serves gradient checks, "
         "where every tensor is f64)");
  return Kind::mixed;
}

// Calls fn.template operator()<T>() with T = float or double.
template <class Fn>
void typed(Kind kind, Fn&& fn) {
  if (kind == Kind::f64)
    fn.template operator()<double>();
  else
    fn.template operator()<float>();
}

std::int64_t cols_of(const Tensor& t) { return t.shape[t.shape.rank - 1]; }
std::int64_t rows_of(const Tensor& t) { return t.numel() / cols_of(t); }

// Token ids and targets (i32, at least one per row: checked by the op's entry point).
const std::int32_t* ids(const Tensor& t) { return t.as<std::int32_t>(); }

template <class T>
T* ptr(const Tensor* t) {
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

class CpuBackend final : public DeviceBackend {
 public:
  explicit CpuBackend(MemoryTracker& memory)
      : DeviceBackend(memory),
        workspace_(memory),
        gemm_(memory),
        index_(memory),
        partials_(memory),
        losses_(memory) {}
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  std::string hardware() const override { return cpu_model_name(); }
  Allocator& allocator() override { return host_allocator(); }
  void synchronize() override {}  // every op has finished when it returns

 private:
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                         bool accumulate) override {
    const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
    const Kind kind = kind_of({&x, &w, bias, &y});
    if (kind == Kind::mixed) {
      const OptionalAny b(bias);
      return cpu::mixed::linear_forward(AnyPtr(x), AnyPtr(w), b.ptr, AnyPtr(y), m, n, k,
                                        accumulate, gemm_);
    }
    typed(kind, [&]<class T>() {
      cpu::linear_forward(x.as<T>(), w.as<T>(), ptr<T>(bias), y.as<T>(), m, n, k, accumulate);
    });
  }
  void do_linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
    const Kind kind = kind_of({&dy, &w, &dx});
    if (kind == Kind::mixed)
      return cpu::mixed::linear_backward_input(AnyPtr(dy), AnyPtr(w), AnyPtr(dx), m, n, k,
                                               accumulate, gemm_);
    typed(kind, [&]<class T>() {
      cpu::linear_backward_input(dy.as<T>(), w.as<T>(), dx.as<T>(), m, n, k, accumulate);
    });
  }
  void do_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                 const Tensor* db, bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = cols_of(x);
    const Kind kind = kind_of({&dy, &x, &dw, db});
    if (kind == Kind::mixed) {
      const OptionalAny b(db);
      return cpu::mixed::linear_backward_weight(AnyPtr(dy), AnyPtr(x), AnyPtr(dw), b.ptr, m, n, k,
                                                accumulate, gemm_);
    }
    typed(kind, [&]<class T>() {
      cpu::linear_backward_weight(dy.as<T>(), x.as<T>(), dw.as<T>(), ptr<T>(db), m, n, k,
                                  accumulate);
    });
  }

  void do_layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, double eps) override {
    const Kind kind = kind_of({&x, &w, &b, &y, &mean, &rstd});
    if (kind == Kind::mixed)
      return cpu::mixed::layernorm_forward(AnyPtr(x), AnyPtr(w), AnyPtr(b), AnyPtr(y),
                                           AnyPtr(mean), AnyPtr(rstd), rows_of(x), cols_of(x),
                                           eps, workspace_);
    typed(kind, [&]<class T>() {
      cpu::layernorm_forward(x.as<T>(), w.as<T>(), b.as<T>(), y.as<T>(), mean.as<T>(),
                             rstd.as<T>(), rows_of(x), cols_of(x), eps);
    });
  }
  void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                             const Tensor& db, bool accumulate) override {
    const Kind kind = kind_of({&dy, &x, &w, &mean, &rstd, &dx, &dw, &db});
    if (kind == Kind::mixed)
      return cpu::mixed::layernorm_backward(AnyPtr(dy), AnyPtr(x), AnyPtr(w), AnyPtr(mean),
                                            AnyPtr(rstd), AnyPtr(dx), AnyPtr(dw), AnyPtr(db),
                                            rows_of(x), cols_of(x), accumulate, workspace_);
    typed(kind, [&]<class T>() {
      cpu::layernorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), mean.as<T>(), rstd.as<T>(),
                              dx.as<T>(), dw.as<T>(), db.as<T>(), rows_of(x), cols_of(x),
                              accumulate);
    });
  }

  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                          double eps) override {
    const Kind kind = kind_of({&x, &w, &y, &rstd});
    if (kind == Kind::mixed)
      return cpu::mixed::rmsnorm_forward(AnyPtr(x), AnyPtr(w), AnyPtr(y), AnyPtr(rstd),
                                         rows_of(x), cols_of(x), eps, workspace_);
    typed(kind, [&]<class T>() {
      cpu::rmsnorm_forward(x.as<T>(), w.as<T>(), y.as<T>(), rstd.as<T>(), rows_of(x), cols_of(x),
                           eps);
    });
  }
  void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw, bool accumulate) override {
    const Kind kind = kind_of({&dy, &x, &w, &rstd, &dx, &dw});
    if (kind == Kind::mixed)
      return cpu::mixed::rmsnorm_backward(AnyPtr(dy), AnyPtr(x), AnyPtr(w), AnyPtr(rstd),
                                          AnyPtr(dx), AnyPtr(dw), rows_of(x), cols_of(x),
                                          accumulate, workspace_);
    typed(kind, [&]<class T>() {
      cpu::rmsnorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), rstd.as<T>(), dx.as<T>(),
                            dw.as<T>(), rows_of(x), cols_of(x), accumulate);
    });
  }

  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) override {
    const Kind kind = kind_of({&gate, &up, &y});
    if (kind == Kind::mixed)
      return cpu::mixed::swiglu_forward(AnyPtr(gate), AnyPtr(up), AnyPtr(y), y.numel());
    typed(kind, [&]<class T>() {
      cpu::swiglu_forward(gate.as<T>(), up.as<T>(), y.as<T>(), y.numel());
    });
  }
  void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                          const Tensor& dgate, const Tensor& dup) override {
    const std::int64_t n = gate.numel();
    const Kind kind = kind_of({&gate, &up, &dy, &dgate, &dup});
    if (kind == Kind::mixed)
      return cpu::mixed::swiglu_backward(AnyPtr(gate), AnyPtr(up), AnyPtr(dy), AnyPtr(dgate),
                                         AnyPtr(dup), n);
    typed(kind, [&]<class T>() {
      cpu::swiglu_backward(gate.as<T>(), up.as<T>(), dy.as<T>(), dgate.as<T>(), dup.as<T>(), n);
    });
  }

  void do_rope(const AttentionShape& s, const Tensor& qkv, double theta, bool inverse) override {
    const Kind kind = kind_of({&qkv});
    if (kind == Kind::mixed)
      return cpu::mixed::rope(s, AnyPtr(qkv), theta, inverse, workspace_);
    typed(kind, [&]<class T>() { cpu::rope(s, qkv.as<T>(), theta, inverse); });
  }

  void do_gelu_forward(const Tensor& x, const Tensor& y) override {
    const Kind kind = kind_of({&x, &y});
    if (kind == Kind::mixed) return cpu::mixed::gelu_forward(AnyPtr(x), AnyPtr(y), x.numel());
    typed(kind, [&]<class T>() { cpu::gelu_forward(x.as<T>(), y.as<T>(), x.numel()); });
  }
  void do_gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    const Kind kind = kind_of({&x, &dy, &dx});
    if (kind == Kind::mixed)
      return cpu::mixed::gelu_backward(AnyPtr(x), AnyPtr(dy), AnyPtr(dx), x.numel());
    typed(kind, [&]<class T>() {
      cpu::gelu_backward(x.as<T>(), dy.as<T>(), dx.as<T>(), x.numel());
    });
  }
  // The MLP's GEMMs with GELU: the unfused ops in sequence, so that the CPU stays the oracle the
  // fused GPU epilogues are checked against and computes exactly what the separate ops compute.
  void do_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                              const Tensor& pre, const Tensor& y) override {
    do_linear_forward(x, w, bias, pre, false);
    do_gelu_forward(pre, y);
  }
  void do_linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                     const Tensor& dx) override {
    do_linear_backward_input(dy, w, dx, false);
    do_gelu_backward(pre, dx, dx);  // in place: gelu_backward lets dx alias dy
  }

  void do_attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse) override {
    const Kind kind = kind_of({&qkv, &out, &lse});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_forward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_forward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), workspace_);
    });
  }
  void do_attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override {
    const Kind kind = kind_of({&qkv, &out, &lse, &dout, &dqkv});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_backward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse),
                                            AnyPtr(dout), AnyPtr(dqkv), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_backward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), dout.as<T>(),
                              dqkv.as<T>(), workspace_);
    });
  }
  void do_attention_decode(const AttentionShape& s, const Tensor& cache, std::int64_t position,
                           const Tensor& out) override {
    const Kind kind = kind_of({&cache, &out});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_decode(s, AnyPtr(cache), position, AnyPtr(out), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_decode(s, cache.as<T>(), position, out.as<T>(), workspace_);
    });
  }

  void do_embedding_forward(const Tensor& token_ids, const Tensor& wte, const Tensor& out,
                            std::int64_t vocab_begin) override {
    const std::int32_t* tokens = ids(token_ids);
    const Kind kind = kind_of({&wte, &out});
    if (kind == Kind::mixed)
      return cpu::mixed::embedding_forward(tokens, rows_of(out), AnyPtr(wte), wte.shape[0],
                                           AnyPtr(out), cols_of(wte), vocab_begin);
    typed(kind, [&]<class T>() {
      cpu::embedding_forward(tokens, rows_of(out), wte.as<T>(), wte.shape[0], out.as<T>(),
                             cols_of(wte), vocab_begin);
    });
  }
  void do_embedding_backward(const Tensor& token_ids, const Tensor& dout, const Tensor& dwte,
                             bool accumulate, std::int64_t vocab_begin) override {
    const std::int32_t* tokens = ids(token_ids);
    const Kind kind = kind_of({&dout, &dwte});
    if (kind == Kind::mixed)
      return cpu::mixed::embedding_backward(tokens, rows_of(dout), AnyPtr(dout), AnyPtr(dwte),
                                            dwte.shape[0], cols_of(dwte), accumulate,
                                            vocab_begin, index_);
    typed(kind, [&]<class T>() {
      cpu::embedding_backward(tokens, rows_of(dout), dout.as<T>(), dwte.as<T>(), dwte.shape[0],
                              cols_of(dwte), accumulate, vocab_begin);
    });
  }
  void do_position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                     std::int64_t first_row) override {
    const Kind kind = kind_of({&x, &wpe});
    if (kind == Kind::mixed)
      return cpu::mixed::position_embedding_forward(AnyPtr(x), rows_of(x), AnyPtr(wpe),
                                                    cols_of(x), seq, first_row);
    typed(kind, [&]<class T>() {
      cpu::position_embedding_forward(x.as<T>(), rows_of(x), wpe.as<T>(), cols_of(x), seq,
                                      first_row);
    });
  }
  void do_position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                      bool accumulate, std::int64_t first_row) override {
    const Kind kind = kind_of({&dx, &dwpe});
    if (kind == Kind::mixed)
      return cpu::mixed::position_embedding_backward(AnyPtr(dx), rows_of(dx), AnyPtr(dwpe),
                                                     dwpe.shape[0], cols_of(dx), seq, accumulate,
                                                     first_row);
    typed(kind, [&]<class T>() {
      cpu::position_embedding_backward(dx.as<T>(), rows_of(dx), dwpe.as<T>(), dwpe.shape[0],
                                       cols_of(dx), seq, accumulate, first_row);
    });
  }

  void do_softmax_row_max(const Tensor& logits, std::int64_t valid,
                          const Tensor& row_max) override {
    const Kind kind = kind_of({&logits, &row_max});
    if (kind == Kind::mixed)
      return cpu::mixed::softmax_row_max(AnyPtr(logits), rows_of(logits), cols_of(logits), valid,
                                         AnyPtr(row_max), workspace_);
    typed(kind, [&]<class T>() {
      cpu::softmax_row_max(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                           row_max.as<T>());
    });
  }
  void do_softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                          const Tensor& target_ids, std::int64_t col_begin,
                          const Tensor& row_sum, const Tensor& target_logit,
                          bool store_exp) override {
    const std::int32_t* targets = ids(target_ids);
    const Kind kind = kind_of({&logits, &row_max, &row_sum, &target_logit});
    if (kind == Kind::mixed)
      return cpu::mixed::softmax_row_sum(AnyPtr(logits), rows_of(logits), cols_of(logits), valid,
                                         AnyPtr(row_max), targets, col_begin, AnyPtr(row_sum),
                                         AnyPtr(target_logit), store_exp, workspace_);
    typed(kind, [&]<class T>() {
      cpu::softmax_row_sum(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                           row_max.as<T>(), targets, col_begin, row_sum.as<T>(),
                           target_logit.as<T>(), store_exp);
    });
  }
  void do_cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                               const Tensor& row_sum, const Tensor& target_logit,
                               const Tensor& target_ids, std::int64_t col_begin,
                               const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits);
    const std::int32_t* targets = ids(target_ids);
    double* losses = losses_.get_as<double>(static_cast<std::size_t>(rows));
    const Kind kind = kind_of({&logits, &row_max, &row_sum, &target_logit});
    if (kind == Kind::mixed) {
      cpu::mixed::cross_entropy_finish(AnyPtr(logits), rows, cols_of(logits), valid,
                                       AnyPtr(row_max), AnyPtr(row_sum), AnyPtr(target_logit),
                                       targets, col_begin, losses, backward, grad_scale,
                                       workspace_);
    } else {
      typed(kind, [&]<class T>() {
        cpu::cross_entropy_finish(logits.as<T>(), rows, cols_of(logits), valid, row_max.as<T>(),
                                  row_sum.as<T>(), target_logit.as<T>(), targets, col_begin,
                                  losses, backward, grad_scale);
      });
    }
    double sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
    add_to_scalar(loss_sum, sum);
  }
  void do_cross_entropy_fused(const Tensor& logits, std::int64_t valid, const Tensor& target_ids,
                              const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits), cols = cols_of(logits);
    const std::int32_t* targets = ids(target_ids);
    double* losses = losses_.get_as<double>(static_cast<std::size_t>(rows));
    const Kind kind = kind_of({&logits});
    if (kind == Kind::mixed)
      cpu::mixed::cross_entropy_fused(AnyPtr(logits), rows, cols, valid, targets, losses,
                                      backward, grad_scale, workspace_);
    else
      typed(kind, [&]<class T>() {
        cpu::cross_entropy_fused(logits.as<T>(), rows, cols, valid, targets, losses, backward,
                                 grad_scale);
      });
    double sum = 0;  // in row order, as cross_entropy_finish
    for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
    add_to_scalar(loss_sum, sum);
  }

  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    const Kind kind = kind_of({&a, &b, &out});
    if (kind == Kind::mixed) return cpu::mixed::add(AnyPtr(a), AnyPtr(b), AnyPtr(out), a.numel());
    typed(kind, [&]<class T>() { cpu::add(a.as<T>(), b.as<T>(), out.as<T>(), a.numel()); });
  }
  void do_add_bias(const Tensor& x, const Tensor& bias) override {
    const Kind kind = kind_of({&x, &bias});
    if (kind == Kind::mixed)
      return cpu::mixed::add_bias(AnyPtr(x), AnyPtr(bias), rows_of(x), cols_of(x), workspace_);
    typed(kind,
          [&]<class T>() { cpu::add_bias(x.as<T>(), bias.as<T>(), rows_of(x), cols_of(x)); });
  }
  void do_scale(const Tensor& x, double factor) override {
    const Kind kind = kind_of({&x});
    if (kind == Kind::mixed) return cpu::mixed::scale(AnyPtr(x), x.numel(), factor);
    typed(kind, [&]<class T>() { cpu::scale(x.as<T>(), x.numel(), factor); });
  }
  void do_copy(const Tensor& src, const Tensor& dst) override {
    std::memcpy(dst.data, src.data, src.bytes());
  }
  void do_zero(const Tensor& x) override { std::memset(x.data, 0, x.bytes()); }
  void do_sum_squares(const Tensor& x, const Tensor& sum) override {
    const Kind kind = kind_of({&x});
    double result = 0;
    if (kind == Kind::mixed)
      result = cpu::mixed::sum_squares(AnyPtr(x), x.numel(), partials_);
    else
      typed(kind, [&]<class T>() { result = cpu::sum_squares(x.as<T>(), x.numel()); });
    add_to_scalar(sum, result);
  }
  void do_sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) override {
    for (const Tensor& x : xs) kind_of({&x});
    cpu::sum_squares_multi(xs, sum.as<double>(), partials_);
  }
  void do_convert(const Tensor& src, const Tensor& dst) override {
    if (src.dtype == dst.dtype) return do_copy(src, dst);
    constexpr std::int64_t kChunk = 1 << 14;
    const std::int64_t n = src.numel();
    const auto* s = static_cast<const char*>(src.data);
    auto* d = static_cast<char*>(dst.data);
    const std::int64_t ss = size_of(src.dtype), ds = size_of(dst.dtype);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; i += kChunk)
      cpu::convert_n(s + i * ss, src.dtype, d + i * ds, dst.dtype, std::min(kChunk, n - i));
  }
  void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamWHyper& h, const Tensor* working_copy) override {
    const std::int64_t n = param.numel();
    const Kind kind = check_adamw(param, grad, m, v, working_copy);
    if (kind == Kind::mixed || working_copy) {
      const OptionalAny wc(working_copy);
      return cpu::mixed::adamw_step(param.as<float>(), AnyPtr(grad), m.as<float>(),
                                    v.as<float>(), wc.ptr, n, h);
    }
    typed(kind, [&]<class T>() {
      cpu::adamw_step(param.as<T>(), grad.as<T>(), m.as<T>(), v.as<T>(), n, h);
    });
  }
  void do_adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) override {
    for (const AdamWRange& r : ranges)
      check_adamw(r.param, r.grad, r.m, r.v, r.working_copy.empty() ? nullptr : &r.working_copy);
    cpu::adamw_step_multi(ranges, h);
  }
  void do_lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const LionHyper& h,
                    const Tensor* working_copy) override {
    const std::int64_t n = param.numel();
    const Kind kind = kind_of({&param, &grad, &m, working_copy});
    if (kind == Kind::mixed || working_copy) {
      if (param.dtype != DType::f32 || m.dtype != DType::f32)
        fail("mixed-precision Lion keeps param (the master copy) and m in f32, not {}/{}",
             name_of(param.dtype), name_of(m.dtype));
      const OptionalAny wc(working_copy);
      return cpu::mixed::lion_step(param.as<float>(), AnyPtr(grad), m.as<float>(), wc.ptr, n, h);
    }
    typed(kind, [&]<class T>() { cpu::lion_step(param.as<T>(), grad.as<T>(), m.as<T>(), n, h); });
  }

 private:
  // adamw_step's types: which kernel it takes.
  static Kind check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const Tensor* working_copy) {
    const Kind kind = kind_of({&param, &grad, &m, &v, working_copy});
    if ((kind == Kind::mixed || working_copy) &&
        (param.dtype != DType::f32 || m.dtype != DType::f32 || v.dtype != DType::f32))
      fail("mixed-precision AdamW keeps param (the master copy), m and v in f32, not {}/{}/{}",
           name_of(param.dtype), name_of(m.dtype), name_of(v.dtype));
    return kind;
  }
  // The f64 [1] a reduction adds to (checked by the op's entry point).
  static void add_to_scalar(const Tensor& scalar, double value) { *scalar.as<double>() += value; }

  cpu::ThreadWorkspace workspace_;  // per-thread rows and blocks
  cpu::GemmWorkspace gemm_;         // mixed-precision GEMM operands and results
  cpu::GrowBuffer index_;           // embedding rows grouped by token
  cpu::GrowBuffer partials_;        // sum_squares(_multi) chunk sums
  cpu::GrowBuffer losses_;          // cross_entropy_finish: each row's loss, summed in order
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& memory) {
  return std::make_unique<CpuBackend>(memory);
}

}  // namespace kintsugi
