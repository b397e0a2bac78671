#include "kintsugi/backend/forwarding_backend.hpp"

namespace kintsugi {

namespace {
double rows(const Tensor& t) { return double(t.numel()) / t.shape[t.shape.rank - 1]; }
double cols(const Tensor& t) { return double(t.shape[t.shape.rank - 1]); }
}  // namespace

ForwardingBackend::ForwardingBackend(Backend& inner) : Backend(inner.memory()), inner_(inner) {}

void ForwardingBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                       const Tensor& y, bool accumulate) {
  around("linear_forward", 2 * rows(x) * cols(x) * w.shape[0],
         [&] { inner_.linear_forward(x, w, bias, y, accumulate); });
}
void ForwardingBackend::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                              bool accumulate) {
  around("linear_backward_input", 2 * rows(dy) * cols(dy) * w.shape[1],
         [&] { inner_.linear_backward_input(dy, w, dx, accumulate); });
}
void ForwardingBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                               const Tensor* db, bool accumulate) {
  around("linear_backward_weight", 2 * rows(dy) * cols(dy) * cols(x),
         [&] { inner_.linear_backward_weight(dy, x, dw, db, accumulate); });
}
void ForwardingBackend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                          const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                          double eps) {
  around("layernorm_forward", 0, [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, eps); });
}
void ForwardingBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                           const Tensor& dw, const Tensor& db, bool accumulate) {
  around("layernorm_backward", 0,
         [&] { inner_.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, accumulate); });
}
void ForwardingBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                        const Tensor& rstd, double eps) {
  around("rmsnorm_forward", 0, [&] { inner_.rmsnorm_forward(x, w, y, rstd, eps); });
}
void ForwardingBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                         const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                         bool accumulate) {
  around("rmsnorm_backward", 0,
         [&] { inner_.rmsnorm_backward(dy, x, w, rstd, dx, dw, accumulate); });
}
void ForwardingBackend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  around("swiglu_forward", 0, [&] { inner_.swiglu_forward(gate, up, y); });
}
void ForwardingBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                                        const Tensor& dgate, const Tensor& dup) {
  around("swiglu_backward", 0, [&] { inner_.swiglu_backward(gate, up, dy, dgate, dup); });
}
void ForwardingBackend::rope(const AttentionShape& s, const Tensor& qkv, double theta,
                             bool inverse) {
  around(inverse ? "rope_backward" : "rope_forward", 0,
         [&] { inner_.rope(s, qkv, theta, inverse); });
}
void ForwardingBackend::gelu_forward(const Tensor& x, const Tensor& y) {
  around("gelu_forward", 0, [&] { inner_.gelu_forward(x, y); });
}
void ForwardingBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  around("gelu_backward", 0, [&] { inner_.gelu_backward(x, dy, dx); });
}
void ForwardingBackend::attention_forward(const AttentionShape& s, const Tensor& qkv,
                                          const Tensor& out, const Tensor& lse) {
  // Model FLOPs of QK^T and PV, in full (see plan/flops.hpp).
  const double f = 4.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  around("attention_forward", f, [&] { inner_.attention_forward(s, qkv, out, lse); });
}
void ForwardingBackend::attention_backward(const AttentionShape& s, const Tensor& qkv,
                                           const Tensor& out, const Tensor& lse, const Tensor& dout,
                                           const Tensor& dqkv) {
  const double f = 8.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  around("attention_backward", f, [&] { inner_.attention_backward(s, qkv, out, lse, dout, dqkv); });
}
void ForwardingBackend::attention_decode(const AttentionShape& s, const Tensor& cache,
                                         std::int64_t position, const Tensor& out) {
  const double f = 4.0 * s.batch * s.heads * double(position + 1) * s.head_dim;
  around("attention_decode", f, [&] { inner_.attention_decode(s, cache, position, out); });
}
void ForwardingBackend::embedding_forward(const Tensor& tokens, const Tensor& wte,
                                          const Tensor& out, std::int64_t vocab_begin) {
  around("embedding_forward", 0, [&] { inner_.embedding_forward(tokens, wte, out, vocab_begin); });
}
void ForwardingBackend::embedding_backward(const Tensor& tokens, const Tensor& dout,
                                           const Tensor& dwte, bool accumulate,
                                           std::int64_t vocab_begin) {
  around("embedding_backward", 0,
         [&] { inner_.embedding_backward(tokens, dout, dwte, accumulate, vocab_begin); });
}
void ForwardingBackend::position_embedding_forward(const Tensor& x, const Tensor& wpe,
                                                   std::int64_t seq, std::int64_t first_row) {
  around("embedding_forward", 0,
         [&] { inner_.position_embedding_forward(x, wpe, seq, first_row); });
}
void ForwardingBackend::position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                                    std::int64_t seq, bool accumulate,
                                                    std::int64_t first_row) {
  around("embedding_backward", 0,
         [&] { inner_.position_embedding_backward(dx, dwpe, seq, accumulate, first_row); });
}
void ForwardingBackend::softmax_row_max(const Tensor& logits, std::int64_t valid,
                                        const Tensor& row_max) {
  around("cross_entropy", 0, [&] { inner_.softmax_row_max(logits, valid, row_max); });
}
void ForwardingBackend::softmax_row_sum(const Tensor& logits, std::int64_t valid,
                                        const Tensor& row_max, const Tensor& targets,
                                        std::int64_t col_begin, const Tensor& row_sum,
                                        const Tensor& target_logit, bool store_exp) {
  around("cross_entropy", 0, [&] {
    inner_.softmax_row_sum(logits, valid, row_max, targets, col_begin, row_sum, target_logit,
                           store_exp);
  });
}
void ForwardingBackend::cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                             const Tensor& row_max, const Tensor& row_sum,
                                             const Tensor& target_logit, const Tensor& targets,
                                             std::int64_t col_begin, const Tensor& loss_sum,
                                             bool backward, double grad_scale) {
  around("cross_entropy", 0, [&] {
    inner_.cross_entropy_finish(logits, valid, row_max, row_sum, target_logit, targets, col_begin,
                                loss_sum, backward, grad_scale);
  });
}
// Timed under the three passes' name, so profiles of either path compare row for row.
void ForwardingBackend::cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                                            const Tensor& targets, const Tensor& loss_sum,
                                            bool backward, double grad_scale) {
  around("cross_entropy", 0, [&] {
    inner_.cross_entropy_fused(logits, valid, targets, loss_sum, backward, grad_scale);
  });
}
void ForwardingBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  around("add", 0, [&] { inner_.add(a, b, out); });
}
void ForwardingBackend::add_bias(const Tensor& x, const Tensor& bias) {
  around("add", 0, [&] { inner_.add_bias(x, bias); });
}
void ForwardingBackend::scale(const Tensor& x, double factor) {
  around("scale", 0, [&] { inner_.scale(x, factor); });
}
void ForwardingBackend::copy(const Tensor& src, const Tensor& dst) {
  around("copy", 0, [&] { inner_.copy(src, dst); });
}
void ForwardingBackend::convert(const Tensor& src, const Tensor& dst) {
  around("convert", 0, [&] { inner_.convert(src, dst); });
}
void ForwardingBackend::zero(const Tensor& x) {
  around("zero", 0, [&] { inner_.zero(x); });
}
void ForwardingBackend::sum_squares(const Tensor& x, const Tensor& sum) {
  around("sum_squares", 0, [&] { inner_.sum_squares(x, sum); });
}
void ForwardingBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                                   const Tensor& v, const AdamWHyper& h,
                                   const Tensor* working_copy) {
  around("adamw", 0, [&] { inner_.adamw_step(param, grad, m, v, h, working_copy); });
}

}  // namespace kintsugi
