// CpuBackend: checks shapes and element types once per call, then hands raw pointers to the
// kernels: the templated ones when every tensor of the op is f32 (training without mixed
// precision) or every one is f64 (gradient checks), the mixed-precision ones for any other mix
// of f32, bf16 and f16 (see backend.hpp).
#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/gemm_mixed.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/lion.hpp"
#include "kintsugi/backend/cpu/linear_gelu.hpp"
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

// Token ids and targets: i32 tensors of at least `rows` elements.
const std::int32_t* ids(const Tensor& t, std::int64_t rows) {
  KINTSUGI_ASSERT(t.dtype == DType::i32 && t.numel() >= rows);
  return t.as<std::int32_t>();
}

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

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MemoryTracker& memory)
      : Backend(memory),
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

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                      bool accumulate) override {
    const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
    KINTSUGI_ASSERT(w.shape[1] == k && rows_of(y) == m && cols_of(y) == n);
    KINTSUGI_ASSERT(!bias || bias->numel() == n);
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
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                             bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
    KINTSUGI_ASSERT(w.shape[0] == n && rows_of(dx) == m && cols_of(dx) == k);
    const Kind kind = kind_of({&dy, &w, &dx});
    if (kind == Kind::mixed)
      return cpu::mixed::linear_backward_input(AnyPtr(dy), AnyPtr(w), AnyPtr(dx), m, n, k,
                                               accumulate, gemm_);
    typed(kind, [&]<class T>() {
      cpu::linear_backward_input(dy.as<T>(), w.as<T>(), dx.as<T>(), m, n, k, accumulate);
    });
  }
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor* db, bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = cols_of(x);
    KINTSUGI_ASSERT(rows_of(x) == m && dw.shape[0] == n && dw.shape[1] == k);
    KINTSUGI_ASSERT(!db || db->numel() == n);
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

  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, double eps) override {
    KINTSUGI_ASSERT(w.numel() == cols_of(x) && mean.numel() == rows_of(x));
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
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
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

  void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                       double eps) override {
    KINTSUGI_ASSERT(w.numel() == cols_of(x) && rstd.numel() == rows_of(x) &&
                    y.numel() == x.numel());
    const Kind kind = kind_of({&x, &w, &y, &rstd});
    if (kind == Kind::mixed)
      return cpu::mixed::rmsnorm_forward(AnyPtr(x), AnyPtr(w), AnyPtr(y), AnyPtr(rstd),
                                         rows_of(x), cols_of(x), eps, workspace_);
    typed(kind, [&]<class T>() {
      cpu::rmsnorm_forward(x.as<T>(), w.as<T>(), y.as<T>(), rstd.as<T>(), rows_of(x), cols_of(x),
                           eps);
    });
  }
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, bool accumulate) override {
    KINTSUGI_ASSERT(w.numel() == cols_of(x) && rstd.numel() == rows_of(x) &&
                    dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == w.numel());
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

  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) override {
    KINTSUGI_ASSERT(gate.numel() == up.numel() && gate.numel() == y.numel());
    const Kind kind = kind_of({&gate, &up, &y});
    if (kind == Kind::mixed)
      return cpu::mixed::swiglu_forward(AnyPtr(gate), AnyPtr(up), AnyPtr(y), y.numel());
    typed(kind, [&]<class T>() {
      cpu::swiglu_forward(gate.as<T>(), up.as<T>(), y.as<T>(), y.numel());
    });
  }
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                       const Tensor& dgate, const Tensor& dup) override {
    const std::int64_t n = gate.numel();
    KINTSUGI_ASSERT(up.numel() == n && dy.numel() == n && dgate.numel() == n && dup.numel() == n);
    const Kind kind = kind_of({&gate, &up, &dy, &dgate, &dup});
    if (kind == Kind::mixed)
      return cpu::mixed::swiglu_backward(AnyPtr(gate), AnyPtr(up), AnyPtr(dy), AnyPtr(dgate),
                                         AnyPtr(dup), n);
    typed(kind, [&]<class T>() {
      cpu::swiglu_backward(gate.as<T>(), up.as<T>(), dy.as<T>(), dgate.as<T>(), dup.as<T>(), n);
    });
  }

  void rope(const AttentionShape& s, const Tensor& qkv, double theta, bool inverse) override {
    KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0 && s.head_dim % 2 == 0);
    KINTSUGI_ASSERT(qkv.numel() == s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim);
    const Kind kind = kind_of({&qkv});
    if (kind == Kind::mixed)
      return cpu::mixed::rope(s, AnyPtr(qkv), theta, inverse, workspace_);
    typed(kind, [&]<class T>() { cpu::rope(s, qkv.as<T>(), theta, inverse); });
  }

  void gelu_forward(const Tensor& x, const Tensor& y) override {
    KINTSUGI_ASSERT(x.numel() == y.numel());
    const Kind kind = kind_of({&x, &y});
    if (kind == Kind::mixed) return cpu::mixed::gelu_forward(AnyPtr(x), AnyPtr(y), x.numel());
    typed(kind, [&]<class T>() { cpu::gelu_forward(x.as<T>(), y.as<T>(), x.numel()); });
  }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    KINTSUGI_ASSERT(x.numel() == dy.numel() && x.numel() == dx.numel());
    const Kind kind = kind_of({&x, &dy, &dx});
    if (kind == Kind::mixed)
      return cpu::mixed::gelu_backward(AnyPtr(x), AnyPtr(dy), AnyPtr(dx), x.numel());
    typed(kind, [&]<class T>() {
      cpu::gelu_backward(x.as<T>(), dy.as<T>(), dx.as<T>(), x.numel());
    });
  }
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& pre,
                           const Tensor& y) override {
    cpu::linear_gelu_forward(*this, x, w, bias, pre, y);
  }
  void linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                  const Tensor& dx) override {
    cpu::linear_backward_input_gelu(*this, dy, w, pre, dx);
  }

  void attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse) override {
    check(s, qkv, out, lse);
    const Kind kind = kind_of({&qkv, &out, &lse});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_forward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_forward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), workspace_);
    });
  }
  void attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override {
    check(s, qkv, out, lse);
    KINTSUGI_ASSERT(dqkv.numel() == qkv.numel() && dout.numel() == out.numel());
    const Kind kind = kind_of({&qkv, &out, &lse, &dout, &dqkv});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_backward(s, AnyPtr(qkv), AnyPtr(out), AnyPtr(lse),
                                            AnyPtr(dout), AnyPtr(dqkv), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_backward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), dout.as<T>(),
                              dqkv.as<T>(), workspace_);
    });
  }
  void attention_decode(const AttentionShape& s, const Tensor& cache, std::int64_t position,
                        const Tensor& out) override {
    KINTSUGI_ASSERT(position >= 0 && position < s.seq);
    KINTSUGI_ASSERT(cache.numel() == s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim);
    KINTSUGI_ASSERT(out.numel() == s.batch * s.heads * s.head_dim);
    const Kind kind = kind_of({&cache, &out});
    if (kind == Kind::mixed)
      return cpu::mixed::attention_decode(s, AnyPtr(cache), position, AnyPtr(out), workspace_);
    typed(kind, [&]<class T>() {
      cpu::attention_decode(s, cache.as<T>(), position, out.as<T>(), workspace_);
    });
  }

  void embedding_forward(const Tensor& token_ids, const Tensor& wte, const Tensor& out,
                         std::int64_t vocab_begin) override {
    KINTSUGI_ASSERT(cols_of(out) == cols_of(wte));
    const std::int32_t* tokens = ids(token_ids, rows_of(out));
    const Kind kind = kind_of({&wte, &out});
    if (kind == Kind::mixed)
      return cpu::mixed::embedding_forward(tokens, rows_of(out), AnyPtr(wte), wte.shape[0],
                                           AnyPtr(out), cols_of(wte), vocab_begin);
    typed(kind, [&]<class T>() {
      cpu::embedding_forward(tokens, rows_of(out), wte.as<T>(), wte.shape[0], out.as<T>(),
                             cols_of(wte), vocab_begin);
    });
  }
  void embedding_backward(const Tensor& token_ids, const Tensor& dout, const Tensor& dwte,
                          bool accumulate, std::int64_t vocab_begin) override {
    KINTSUGI_ASSERT(cols_of(dout) == cols_of(dwte));
    const std::int32_t* tokens = ids(token_ids, rows_of(dout));
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
  void position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                  std::int64_t first_row) override {
    KINTSUGI_ASSERT(cols_of(x) == cols_of(wpe) && wpe.shape[0] >= seq);
    const Kind kind = kind_of({&x, &wpe});
    if (kind == Kind::mixed)
      return cpu::mixed::position_embedding_forward(AnyPtr(x), rows_of(x), AnyPtr(wpe),
                                                    cols_of(x), seq, first_row);
    typed(kind, [&]<class T>() {
      cpu::position_embedding_forward(x.as<T>(), rows_of(x), wpe.as<T>(), cols_of(x), seq,
                                      first_row);
    });
  }
  void position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                   bool accumulate, std::int64_t first_row) override {
    KINTSUGI_ASSERT(cols_of(dx) == cols_of(dwpe) && dwpe.shape[0] >= seq);
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

  void softmax_row_max(const Tensor& logits, std::int64_t valid, const Tensor& row_max) override {
    KINTSUGI_ASSERT(valid <= cols_of(logits) && row_max.numel() == rows_of(logits));
    const Kind kind = kind_of({&logits, &row_max});
    if (kind == Kind::mixed)
      return cpu::mixed::softmax_row_max(AnyPtr(logits), rows_of(logits), cols_of(logits), valid,
                                         AnyPtr(row_max), workspace_);
    typed(kind, [&]<class T>() {
      cpu::softmax_row_max(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                           row_max.as<T>());
    });
  }
  void softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                       const Tensor& target_ids, std::int64_t col_begin,
                       const Tensor& row_sum, const Tensor& target_logit,
                       bool store_exp) override {
    KINTSUGI_ASSERT(valid <= cols_of(logits) && row_sum.numel() == rows_of(logits));
    const std::int32_t* targets = ids(target_ids, rows_of(logits));
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
  void cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                            const Tensor& row_sum, const Tensor& target_logit,
                            const Tensor& target_ids, std::int64_t col_begin,
                            const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits);
    KINTSUGI_ASSERT(valid <= cols_of(logits) && row_sum.numel() == rows);
    const std::int32_t* targets = ids(target_ids, rows);
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
  void cross_entropy_fused(const Tensor& logits, std::int64_t valid, const Tensor& target_ids,
                           const Tensor& loss_sum, bool backward, double grad_scale) override {
    const std::int64_t rows = rows_of(logits), cols = cols_of(logits);
    KINTSUGI_ASSERT(valid <= cols);
    const std::int32_t* targets = ids(target_ids, rows);
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

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    KINTSUGI_ASSERT(a.numel() == b.numel() && a.numel() == out.numel());
    const Kind kind = kind_of({&a, &b, &out});
    if (kind == Kind::mixed) return cpu::mixed::add(AnyPtr(a), AnyPtr(b), AnyPtr(out), a.numel());
    typed(kind, [&]<class T>() { cpu::add(a.as<T>(), b.as<T>(), out.as<T>(), a.numel()); });
  }
  void add_bias(const Tensor& x, const Tensor& bias) override {
    KINTSUGI_ASSERT(bias.numel() == cols_of(x));
    const Kind kind = kind_of({&x, &bias});
    if (kind == Kind::mixed)
      return cpu::mixed::add_bias(AnyPtr(x), AnyPtr(bias), rows_of(x), cols_of(x), workspace_);
    typed(kind,
          [&]<class T>() { cpu::add_bias(x.as<T>(), bias.as<T>(), rows_of(x), cols_of(x)); });
  }
  void scale(const Tensor& x, double factor) override {
    const Kind kind = kind_of({&x});
    if (kind == Kind::mixed) return cpu::mixed::scale(AnyPtr(x), x.numel(), factor);
    typed(kind, [&]<class T>() { cpu::scale(x.as<T>(), x.numel(), factor); });
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    KINTSUGI_ASSERT(src.bytes() == dst.bytes() && src.dtype == dst.dtype);
    std::memcpy(dst.data, src.data, src.bytes());
  }
  void zero(const Tensor& x) override { std::memset(x.data, 0, x.bytes()); }
  void sum_squares(const Tensor& x, const Tensor& sum) override {
    const Kind kind = kind_of({&x});
    double result = 0;
    if (kind == Kind::mixed)
      result = cpu::mixed::sum_squares(AnyPtr(x), x.numel(), partials_);
    else
      typed(kind, [&]<class T>() { result = cpu::sum_squares(x.as<T>(), x.numel()); });
    add_to_scalar(sum, result);
  }
  void sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) override {
    for (const Tensor& x : xs) kind_of({&x});
    KINTSUGI_ASSERT(sum.dtype == DType::f64 && sum.numel() == 1);
    cpu::sum_squares_multi(xs, sum.as<double>(), partials_);
  }
  void convert(const Tensor& src, const Tensor& dst) override {
    KINTSUGI_ASSERT(src.numel() == dst.numel());
    if (src.dtype == dst.dtype) return copy(src, dst);
    if (!is_float(src.dtype) || !is_float(dst.dtype))
      fail("convert takes float tensors, not {} to {}", name_of(src.dtype), name_of(dst.dtype));
    constexpr std::int64_t kChunk = 1 << 14;
    const std::int64_t n = src.numel();
    const auto* s = static_cast<const char*>(src.data);
    auto* d = static_cast<char*>(dst.data);
    const std::int64_t ss = size_of(src.dtype), ds = size_of(dst.dtype);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; i += kChunk)
      cpu::convert_n(s + i * ss, src.dtype, d + i * ds, dst.dtype, std::min(kChunk, n - i));
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
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
  void adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) override {
    for (const AdamWRange& r : ranges)
      check_adamw(r.param, r.grad, r.m, r.v, r.working_copy.empty() ? nullptr : &r.working_copy);
    cpu::adamw_step_multi(ranges, h);
  }
  void lion_step(const Tensor& param, const Tensor& grad, const Tensor& m, const LionHyper& h,
                 const Tensor* working_copy) override {
    const std::int64_t n = param.numel();
    KINTSUGI_ASSERT(grad.numel() == n && m.numel() == n);
    KINTSUGI_ASSERT(!working_copy || working_copy->numel() == n);
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
  // adamw_step's lengths and types: which kernel it takes.
  static Kind check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const Tensor* working_copy) {
    const std::int64_t n = param.numel();
    KINTSUGI_ASSERT(grad.numel() == n && m.numel() == n && v.numel() == n);
    KINTSUGI_ASSERT(!working_copy || working_copy->numel() == n);
    const Kind kind = kind_of({&param, &grad, &m, &v, working_copy});
    if ((kind == Kind::mixed || working_copy) &&
        (param.dtype != DType::f32 || m.dtype != DType::f32 || v.dtype != DType::f32))
      fail("mixed-precision AdamW keeps param (the master copy), m and v in f32, not {}/{}/{}",
           name_of(param.dtype), name_of(m.dtype), name_of(v.dtype));
    return kind;
  }
  static void add_to_scalar(const Tensor& scalar, double value) {
    KINTSUGI_ASSERT(scalar.dtype == DType::f64 && scalar.numel() == 1);
    *scalar.as<double>() += value;
  }
  static void check(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                    const Tensor& lse) {
    KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
    KINTSUGI_ASSERT(qkv.numel() ==
                    s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim);
    KINTSUGI_ASSERT(out.numel() == s.batch * s.seq * s.heads * s.head_dim);
    KINTSUGI_ASSERT(lse.numel() == s.batch * s.heads * s.seq);
  }

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
