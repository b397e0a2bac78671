// CpuBackend: checks shapes and element types once per call, then hands raw pointers to the
// templated kernels (f32 for training, f64 for gradient checks).
#include <cstring>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/backend/cpu/kernels.hpp"
#include "kintsugi/backend/cpu/workspace.hpp"

namespace kintsugi {

namespace {

// Calls fn.template operator()<T>() with T the C++ type of `dtype`.
template <class Fn>
void dispatch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: fail("the CPU backend has no {} kernels yet", name_of(dtype));
  }
}

std::int64_t cols_of(const Tensor& t) { return t.shape[t.shape.rank - 1]; }
std::int64_t rows_of(const Tensor& t) { return t.numel() / cols_of(t); }

void same_dtype(const Tensor& a, const Tensor& b) { KINTSUGI_ASSERT(a.dtype == b.dtype); }

template <class T>
T* ptr(const Tensor* t) {
  return t ? t->as<T>() : nullptr;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MemoryTracker& memory) : Backend(memory), workspace_(memory) {}
  std::string_view name() const override { return "cpu"; }
  Buffer allocate(MemoryKind kind, std::size_t bytes) override {
    return Buffer(memory(), kind, bytes);
  }

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                      bool accumulate) override {
    const std::int64_t m = rows_of(x), k = cols_of(x), n = w.shape[0];
    KINTSUGI_ASSERT(w.shape[1] == k && rows_of(y) == m && cols_of(y) == n);
    same_dtype(x, w);
    dispatch(x.dtype, [&]<class T>() {
      cpu::linear_forward(x.as<T>(), w.as<T>(), ptr<T>(bias), y.as<T>(), m, n, k, accumulate);
    });
  }
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                             bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = w.shape[1];
    KINTSUGI_ASSERT(w.shape[0] == n && rows_of(dx) == m && cols_of(dx) == k);
    dispatch(dy.dtype, [&]<class T>() {
      cpu::linear_backward_input(dy.as<T>(), w.as<T>(), dx.as<T>(), m, n, k, accumulate);
    });
  }
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor* db, bool accumulate) override {
    const std::int64_t m = rows_of(dy), n = cols_of(dy), k = cols_of(x);
    KINTSUGI_ASSERT(rows_of(x) == m && dw.shape[0] == n && dw.shape[1] == k);
    dispatch(dy.dtype, [&]<class T>() {
      cpu::linear_backward_weight(dy.as<T>(), x.as<T>(), dw.as<T>(), ptr<T>(db), m, n, k,
                                  accumulate);
    });
  }

  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, double eps) override {
    KINTSUGI_ASSERT(w.numel() == cols_of(x) && mean.numel() == rows_of(x));
    dispatch(x.dtype, [&]<class T>() {
      cpu::layernorm_forward(x.as<T>(), w.as<T>(), b.as<T>(), y.as<T>(), mean.as<T>(),
                             rstd.as<T>(), rows_of(x), cols_of(x), eps);
    });
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                          const Tensor& db, bool accumulate) override {
    dispatch(x.dtype, [&]<class T>() {
      cpu::layernorm_backward(dy.as<T>(), x.as<T>(), w.as<T>(), mean.as<T>(), rstd.as<T>(),
                              dx.as<T>(), dw.as<T>(), db.as<T>(), rows_of(x), cols_of(x),
                              accumulate);
    });
  }

  void gelu_forward(const Tensor& x, const Tensor& y) override {
    KINTSUGI_ASSERT(x.numel() == y.numel());
    dispatch(x.dtype, [&]<class T>() { cpu::gelu_forward(x.as<T>(), y.as<T>(), x.numel()); });
  }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    dispatch(x.dtype, [&]<class T>() {
      cpu::gelu_backward(x.as<T>(), dy.as<T>(), dx.as<T>(), x.numel());
    });
  }

  void attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse) override {
    check(s, qkv, out, lse);
    dispatch(qkv.dtype, [&]<class T>() {
      cpu::attention_forward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), workspace_);
    });
  }
  void attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dqkv) override {
    check(s, qkv, out, lse);
    KINTSUGI_ASSERT(dqkv.numel() == qkv.numel() && dout.numel() == out.numel());
    dispatch(qkv.dtype, [&]<class T>() {
      cpu::attention_backward(s, qkv.as<T>(), out.as<T>(), lse.as<T>(), dout.as<T>(),
                              dqkv.as<T>(), workspace_);
    });
  }

  void embedding_forward(const std::int32_t* tokens, const Tensor& wte, const Tensor& out,
                         std::int64_t vocab_begin) override {
    KINTSUGI_ASSERT(cols_of(out) == cols_of(wte));
    dispatch(wte.dtype, [&]<class T>() {
      cpu::embedding_forward(tokens, rows_of(out), wte.as<T>(), wte.shape[0], out.as<T>(),
                             cols_of(wte), vocab_begin);
    });
  }
  void embedding_backward(const std::int32_t* tokens, const Tensor& dout, const Tensor& dwte,
                          bool accumulate, std::int64_t vocab_begin) override {
    KINTSUGI_ASSERT(cols_of(dout) == cols_of(dwte));
    dispatch(dwte.dtype, [&]<class T>() {
      cpu::embedding_backward(tokens, rows_of(dout), dout.as<T>(), dwte.as<T>(), dwte.shape[0],
                              cols_of(dwte), accumulate, vocab_begin);
    });
  }
  void position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                  std::int64_t first_row) override {
    KINTSUGI_ASSERT(cols_of(x) == cols_of(wpe) && wpe.shape[0] >= seq);
    dispatch(x.dtype, [&]<class T>() {
      cpu::position_embedding_forward(x.as<T>(), rows_of(x), wpe.as<T>(), cols_of(x), seq,
                                      first_row);
    });
  }
  void position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                   bool accumulate, std::int64_t first_row) override {
    KINTSUGI_ASSERT(cols_of(dx) == cols_of(dwpe) && dwpe.shape[0] >= seq);
    dispatch(dx.dtype, [&]<class T>() {
      cpu::position_embedding_backward(dx.as<T>(), rows_of(dx), dwpe.as<T>(), dwpe.shape[0],
                                       cols_of(dx), seq, accumulate, first_row);
    });
  }

  void softmax_row_max(const Tensor& logits, std::int64_t valid, const Tensor& row_max) override {
    KINTSUGI_ASSERT(valid <= cols_of(logits) && row_max.numel() == rows_of(logits));
    dispatch(logits.dtype, [&]<class T>() {
      cpu::softmax_row_max(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                           row_max.as<T>());
    });
  }
  void softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                       const std::int32_t* targets, std::int64_t col_begin,
                       const Tensor& row_sum, const Tensor& target_logit,
                       bool store_exp) override {
    dispatch(logits.dtype, [&]<class T>() {
      cpu::softmax_row_sum(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                           row_max.as<T>(), targets, col_begin, row_sum.as<T>(),
                           target_logit.as<T>(), store_exp);
    });
  }
  void cross_entropy_finish(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                            const Tensor& row_sum, const Tensor& target_logit,
                            const std::int32_t* targets, std::int64_t col_begin, double* losses,
                            bool backward, double grad_scale) override {
    dispatch(logits.dtype, [&]<class T>() {
      cpu::cross_entropy_finish(logits.as<T>(), rows_of(logits), cols_of(logits), valid,
                                row_max.as<T>(), row_sum.as<T>(), target_logit.as<T>(), targets,
                                col_begin, losses, backward, grad_scale);
    });
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    KINTSUGI_ASSERT(a.numel() == b.numel() && a.numel() == out.numel());
    dispatch(a.dtype,
             [&]<class T>() { cpu::add(a.as<T>(), b.as<T>(), out.as<T>(), a.numel()); });
  }
  void add_bias(const Tensor& x, const Tensor& bias) override {
    KINTSUGI_ASSERT(bias.numel() == cols_of(x));
    dispatch(x.dtype,
             [&]<class T>() { cpu::add_bias(x.as<T>(), bias.as<T>(), rows_of(x), cols_of(x)); });
  }
  void scale(const Tensor& x, double factor) override {
    dispatch(x.dtype, [&]<class T>() { cpu::scale(x.as<T>(), x.numel(), factor); });
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    KINTSUGI_ASSERT(src.bytes() == dst.bytes() && src.dtype == dst.dtype);
    std::memcpy(dst.data, src.data, src.bytes());
  }
  void zero(const Tensor& x) override { std::memset(x.data, 0, x.bytes()); }
  double sum_squares(const Tensor& x) override {
    double result = 0;
    dispatch(x.dtype, [&]<class T>() { result = cpu::sum_squares(x.as<T>(), x.numel()); });
    return result;
  }
  void convert(const Tensor& src, const Tensor& dst) override {
    KINTSUGI_ASSERT(src.numel() == dst.numel());
    if (src.dtype == dst.dtype) return copy(src, dst);
    fail("converting {} to {} is not supported yet", name_of(src.dtype), name_of(dst.dtype));
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h, const Tensor* working_copy) override {
    KINTSUGI_ASSERT(param.numel() == grad.numel() && m.numel() == param.numel() &&
                    v.numel() == param.numel());
    if (working_copy) fail("mixed-precision AdamW is not supported yet");
    dispatch(param.dtype, [&]<class T>() {
      cpu::adamw_step(param.as<T>(), grad.as<T>(), m.as<T>(), v.as<T>(), param.numel(), h);
    });
  }

 private:
  static void check(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                    const Tensor& lse) {
    KINTSUGI_ASSERT(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
    KINTSUGI_ASSERT(qkv.numel() ==
                    s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim);
    KINTSUGI_ASSERT(out.numel() == s.batch * s.seq * s.heads * s.head_dim);
    KINTSUGI_ASSERT(lse.numel() == s.batch * s.heads * s.seq);
  }

  cpu::ThreadWorkspace workspace_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& memory) {
  return std::make_unique<CpuBackend>(memory);
}

}  // namespace kintsugi
