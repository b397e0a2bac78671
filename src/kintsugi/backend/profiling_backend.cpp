#include "kintsugi/backend/profiling_backend.hpp"

#include "kintsugi/core/timer.hpp"

namespace kintsugi {

namespace {
double rows(const Tensor& t) { return double(t.numel()) / t.shape[t.shape.rank - 1]; }
double cols(const Tensor& t) { return double(t.shape[t.shape.rank - 1]); }
}  // namespace

ProfilingBackend::ProfilingBackend(Backend& inner) : Backend(inner.memory()), inner_(inner) {}

template <class Fn>
auto ProfilingBackend::timed(const char* op, double flops, Fn&& fn) {
  Stopwatch clock;
  auto record = [&] {
    OpProfile& p = profile_[op];
    ++p.calls;
    p.seconds += clock.seconds();
    p.flops += flops;
  };
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    record();
  } else {
    auto result = fn();
    record();
    return result;
  }
}

void ProfilingBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const Tensor& y, bool accumulate) {
  timed("linear_forward", 2 * rows(x) * cols(x) * w.shape[0],
        [&] { inner_.linear_forward(x, w, bias, y, accumulate); });
}
void ProfilingBackend::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                             bool accumulate) {
  timed("linear_backward_input", 2 * rows(dy) * cols(dy) * w.shape[1],
        [&] { inner_.linear_backward_input(dy, w, dx, accumulate); });
}
void ProfilingBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                              const Tensor* db, bool accumulate) {
  timed("linear_backward_weight", 2 * rows(dy) * cols(dy) * cols(x),
        [&] { inner_.linear_backward_weight(dy, x, dw, db, accumulate); });
}
void ProfilingBackend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                         const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                         double eps) {
  timed("layernorm_forward", 0, [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, eps); });
}
void ProfilingBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                          const Tensor& mean, const Tensor& rstd,
                                          const Tensor& dx, const Tensor& dw, const Tensor& db,
                                          bool accumulate) {
  timed("layernorm_backward", 0,
        [&] { inner_.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, accumulate); });
}
void ProfilingBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                       const Tensor& rstd, double eps) {
  timed("rmsnorm_forward", 0, [&] { inner_.rmsnorm_forward(x, w, y, rstd, eps); });
}
void ProfilingBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                        const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                        bool accumulate) {
  timed("rmsnorm_backward", 0,
        [&] { inner_.rmsnorm_backward(dy, x, w, rstd, dx, dw, accumulate); });
}
void ProfilingBackend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  timed("swiglu_forward", 0, [&] { inner_.swiglu_forward(gate, up, y); });
}
void ProfilingBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                                       const Tensor& dgate, const Tensor& dup) {
  timed("swiglu_backward", 0, [&] { inner_.swiglu_backward(gate, up, dy, dgate, dup); });
}
void ProfilingBackend::rope(const AttentionShape& s, const Tensor& qkv, double theta,
                            bool inverse) {
  timed(inverse ? "rope_backward" : "rope_forward", 0,
        [&] { inner_.rope(s, qkv, theta, inverse); });
}
void ProfilingBackend::gelu_forward(const Tensor& x, const Tensor& y) {
  timed("gelu_forward", 0, [&] { inner_.gelu_forward(x, y); });
}
void ProfilingBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  timed("gelu_backward", 0, [&] { inner_.gelu_backward(x, dy, dx); });
}
void ProfilingBackend::attention_forward(const AttentionShape& s, const Tensor& qkv,
                                         const Tensor& out, const Tensor& lse) {
  // Model FLOPs of QK^T and PV, in full (see plan/flops.hpp).
  const double f = 4.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  timed("attention_forward", f, [&] { inner_.attention_forward(s, qkv, out, lse); });
}
void ProfilingBackend::attention_backward(const AttentionShape& s, const Tensor& qkv,
                                          const Tensor& out, const Tensor& lse,
                                          const Tensor& dout, const Tensor& dqkv) {
  const double f = 8.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  timed("attention_backward", f,
        [&] { inner_.attention_backward(s, qkv, out, lse, dout, dqkv); });
}
void ProfilingBackend::embedding_forward(const std::int32_t* tokens, const Tensor& wte,
                                         const Tensor& out, std::int64_t vocab_begin) {
  timed("embedding_forward", 0, [&] { inner_.embedding_forward(tokens, wte, out, vocab_begin); });
}
void ProfilingBackend::embedding_backward(const std::int32_t* tokens, const Tensor& dout,
                                          const Tensor& dwte, bool accumulate,
                                          std::int64_t vocab_begin) {
  timed("embedding_backward", 0,
        [&] { inner_.embedding_backward(tokens, dout, dwte, accumulate, vocab_begin); });
}
void ProfilingBackend::position_embedding_forward(const Tensor& x, const Tensor& wpe,
                                                  std::int64_t seq, std::int64_t first_row) {
  timed("embedding_forward", 0,
        [&] { inner_.position_embedding_forward(x, wpe, seq, first_row); });
}
void ProfilingBackend::position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                                   std::int64_t seq, bool accumulate,
                                                   std::int64_t first_row) {
  timed("embedding_backward", 0,
        [&] { inner_.position_embedding_backward(dx, dwpe, seq, accumulate, first_row); });
}
void ProfilingBackend::softmax_row_max(const Tensor& logits, std::int64_t valid,
                                       const Tensor& row_max) {
  timed("cross_entropy", 0, [&] { inner_.softmax_row_max(logits, valid, row_max); });
}
void ProfilingBackend::softmax_row_sum(const Tensor& logits, std::int64_t valid,
                                       const Tensor& row_max, const std::int32_t* targets,
                                       std::int64_t col_begin, const Tensor& row_sum,
                                       const Tensor& target_logit, bool store_exp) {
  timed("cross_entropy", 0, [&] {
    inner_.softmax_row_sum(logits, valid, row_max, targets, col_begin, row_sum, target_logit,
                           store_exp);
  });
}
void ProfilingBackend::cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                            const Tensor& row_max, const Tensor& row_sum,
                                            const Tensor& target_logit,
                                            const std::int32_t* targets, std::int64_t col_begin,
                                            double* losses, bool backward, double grad_scale) {
  timed("cross_entropy", 0, [&] {
    inner_.cross_entropy_finish(logits, valid, row_max, row_sum, target_logit, targets,
                                col_begin, losses, backward, grad_scale);
  });
}
void ProfilingBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  timed("add", 0, [&] { inner_.add(a, b, out); });
}
void ProfilingBackend::add_bias(const Tensor& x, const Tensor& bias) {
  timed("add", 0, [&] { inner_.add_bias(x, bias); });
}
void ProfilingBackend::scale(const Tensor& x, double factor) {
  timed("scale", 0, [&] { inner_.scale(x, factor); });
}
void ProfilingBackend::copy(const Tensor& src, const Tensor& dst) {
  timed("copy", 0, [&] { inner_.copy(src, dst); });
}
void ProfilingBackend::convert(const Tensor& src, const Tensor& dst) {
  timed("convert", 0, [&] { inner_.convert(src, dst); });
}
void ProfilingBackend::zero(const Tensor& x) {
  timed("zero", 0, [&] { inner_.zero(x); });
}
double ProfilingBackend::sum_squares(const Tensor& x) {
  return timed("sum_squares", 0, [&] { return inner_.sum_squares(x); });
}
void ProfilingBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                                  const Tensor& v, const AdamWHyper& h,
                                  const Tensor* working_copy) {
  timed("adamw", 0, [&] { inner_.adamw_step(param, grad, m, v, h, working_copy); });
}

}  // namespace kintsugi
