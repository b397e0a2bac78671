#include "kintsugi/backend/forwarding_backend.hpp"

#include <algorithm>

namespace kintsugi {

namespace {
std::int64_t rows(const Tensor& t) { return t.numel() / t.shape[t.shape.rank - 1]; }
std::int64_t cols(const Tensor& t) { return t.shape[t.shape.rank - 1]; }
double bytes(const Tensor& t) { return static_cast<double>(t.bytes()); }
double bytes(const Tensor* t) { return t ? bytes(*t) : 0; }
// `n` elements of t's type.
double bytes(const Tensor& t, std::int64_t n) {
  return static_cast<double>(n) * static_cast<double>(size_of(t.dtype));
}
// param, m and v read and written; grad read; the working copy written.
double adamw_bytes(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor* working_copy) {
  return 2 * (bytes(param) + bytes(m) + bytes(v)) + bytes(grad) + bytes(working_copy);
}
// Lion: param and m read and written; grad read; the working copy written.
double lion_bytes(const Tensor& param, const Tensor& grad, const Tensor& m,
                  const Tensor* working_copy) {
  return 2 * (bytes(param) + bytes(m)) + bytes(grad) + bytes(working_copy);
}
// The rows x columns of a matrix (a vector's one dimension).
Shape matrix(const Tensor& t) { return t.shape.rank <= 1 ? t.shape : Shape{rows(t), cols(t)}; }
OpCall op_call(const char* name, double flops, double moved, const Tensor& main) {
  return OpCall{name, flops, moved, matrix(main), main.dtype};
}
OpCall attention_call(const char* name, double flops, double moved, const AttentionShape& s,
                      const Tensor& qkv) {
  return OpCall{name, flops, moved, Shape{s.batch, s.seq, s.heads, s.head_dim}, qkv.dtype};
}
// Document starts (AttentionShape::doc_start), read once per row when given.
double doc_starts(const AttentionShape& s) {
  return s.doc_start ? 4.0 * static_cast<double>(s.batch * s.seq) : 0;
}
}  // namespace

ForwardingBackend::ForwardingBackend(Backend& inner) : Backend(inner.memory()), inner_(inner) {}

void ForwardingBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                       const Tensor& y, bool accumulate) {
  const std::int64_t m = rows(x), n = w.shape[0], k = cols(x);
  const double moved = bytes(x) + bytes(w) + bytes(bias) + bytes(y) * (accumulate ? 2 : 1);
  around(OpCall{"linear_forward", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
         [&] { inner_.linear_forward(x, w, bias, y, accumulate); });
}
void ForwardingBackend::linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                              bool accumulate) {
  const std::int64_t m = rows(dy), n = cols(dy), k = w.shape[1];
  const double moved = bytes(dy) + bytes(w) + bytes(dx) * (accumulate ? 2 : 1);
  around(OpCall{"linear_backward_input", 2.0 * m * n * k, moved, Shape{m, n, k}, dy.dtype},
         [&] { inner_.linear_backward_input(dy, w, dx, accumulate); });
}
void ForwardingBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                               const Tensor* db, bool accumulate) {
  const std::int64_t m = rows(dy), n = cols(dy), k = cols(x);
  const double moved = bytes(dy) + bytes(x) + (bytes(dw) + bytes(db)) * (accumulate ? 2 : 1);
  around(OpCall{"linear_backward_weight", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
         [&] { inner_.linear_backward_weight(dy, x, dw, db, accumulate); });
}
void ForwardingBackend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                          const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                          double eps) {
  const double moved = bytes(x) + bytes(w) + bytes(b) + bytes(y) + bytes(mean) + bytes(rstd);
  around(op_call("layernorm_forward", 0, moved, x),
         [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, eps); });
}
void ForwardingBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                           const Tensor& dw, const Tensor& db, bool accumulate) {
  // dx always accumulates (backend.hpp): read and written.
  const double moved = bytes(dy) + bytes(x) + bytes(w) + bytes(mean) + bytes(rstd) +
                       2 * bytes(dx) + (bytes(dw) + bytes(db)) * (accumulate ? 2 : 1);
  around(op_call("layernorm_backward", 0, moved, x),
         [&] { inner_.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, accumulate); });
}
void ForwardingBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                        const Tensor& rstd, double eps) {
  const double moved = bytes(x) + bytes(w) + bytes(y) + bytes(rstd);
  around(op_call("rmsnorm_forward", 0, moved, x),
         [&] { inner_.rmsnorm_forward(x, w, y, rstd, eps); });
}
void ForwardingBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                         const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                         bool accumulate) {
  const double moved = bytes(dy) + bytes(x) + bytes(w) + bytes(rstd) + 2 * bytes(dx) +
                       bytes(dw) * (accumulate ? 2 : 1);
  around(op_call("rmsnorm_backward", 0, moved, x),
         [&] { inner_.rmsnorm_backward(dy, x, w, rstd, dx, dw, accumulate); });
}
void ForwardingBackend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  around(op_call("swiglu_forward", 0, bytes(gate) + bytes(up) + bytes(y), gate),
         [&] { inner_.swiglu_forward(gate, up, y); });
}
void ForwardingBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                                        const Tensor& dgate, const Tensor& dup) {
  const double moved = bytes(gate) + bytes(up) + bytes(dy) + bytes(dgate) + bytes(dup);
  around(op_call("swiglu_backward", 0, moved, gate),
         [&] { inner_.swiglu_backward(gate, up, dy, dgate, dup); });
}
void ForwardingBackend::rope(const AttentionShape& s, const Tensor& qkv, double theta,
                             bool inverse) {
  // The queries and keys are read and written, the values untouched: per kv head, its group of
  // heads / kv_heads queries and one key out of heads / kv_heads + 2 vectors.
  const double rotated =
      bytes(qkv) * double(s.heads + s.kv_heads) / double(s.heads + 2 * s.kv_heads);
  around(attention_call(inverse ? "rope_backward" : "rope_forward", 0,
                        2 * rotated + doc_starts(s), s, qkv),
         [&] { inner_.rope(s, qkv, theta, inverse); });
}
void ForwardingBackend::gelu_forward(const Tensor& x, const Tensor& y) {
  around(op_call("gelu_forward", 0, bytes(x) + bytes(y), x), [&] { inner_.gelu_forward(x, y); });
}
void ForwardingBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  around(op_call("gelu_backward", 0, bytes(x) + bytes(dy) + bytes(dx), x),
         [&] { inner_.gelu_backward(x, dy, dx); });
}
// The GELU MLP's fused ops: what a fused GEMM moves (the GELU's input written or read besides
// the product's operands and result).
void ForwardingBackend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                            const Tensor& pre, const Tensor& y) {
  const std::int64_t m = rows(x), n = w.shape[0], k = cols(x);
  const double moved = bytes(x) + bytes(w) + bytes(bias) + bytes(pre) + bytes(y);
  around(OpCall{"linear_gelu_forward", 2.0 * m * n * k, moved, Shape{m, n, k}, x.dtype},
         [&] { inner_.linear_gelu_forward(x, w, bias, pre, y); });
}
void ForwardingBackend::linear_backward_input_gelu(const Tensor& dy, const Tensor& w,
                                                   const Tensor& pre, const Tensor& dx) {
  const std::int64_t m = rows(dy), n = cols(dy), k = w.shape[1];
  const double moved = bytes(dy) + bytes(w) + bytes(pre) + bytes(dx);
  around(OpCall{"linear_backward_input_gelu", 2.0 * m * n * k, moved, Shape{m, n, k}, dy.dtype},
         [&] { inner_.linear_backward_input_gelu(dy, w, pre, dx); });
}
void ForwardingBackend::attention_forward(const AttentionShape& s, const Tensor& qkv,
                                          const Tensor& out, const Tensor& lse) {
  // Model FLOPs of QK^T and PV, in full (see plan/flops.hpp).
  const double f = 4.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  const double moved = bytes(qkv) + bytes(out) + bytes(lse) + doc_starts(s);
  around(attention_call("attention_forward", f, moved, s, qkv),
         [&] { inner_.attention_forward(s, qkv, out, lse); });
}
void ForwardingBackend::attention_backward(const AttentionShape& s, const Tensor& qkv,
                                           const Tensor& out, const Tensor& lse, const Tensor& dout,
                                           const Tensor& dqkv) {
  const double f = 8.0 * s.batch * s.heads * double(s.seq) * s.seq * s.head_dim;
  const double moved =
      bytes(qkv) + bytes(out) + bytes(lse) + bytes(dout) + bytes(dqkv) + doc_starts(s);
  around(attention_call("attention_backward", f, moved, s, qkv),
         [&] { inner_.attention_backward(s, qkv, out, lse, dout, dqkv); });
}
void ForwardingBackend::attention_decode(const AttentionShape& s, const Tensor& cache,
                                         std::int64_t position, const Tensor& out) {
  const double f = 4.0 * s.batch * s.heads * double(position + 1) * s.head_dim;
  // Keys and values of rows 0..position and the queries of row `position`, of each sequence.
  const std::int64_t read =
      s.batch * ((position + 1) * 2 * s.kv_heads + s.heads) * s.head_dim;
  around(attention_call("attention_decode", f, bytes(cache, read) + bytes(out), s, cache),
         [&] { inner_.attention_decode(s, cache, position, out); });
}
void ForwardingBackend::embedding_forward(const Tensor& tokens, const Tensor& wte,
                                          const Tensor& out, std::int64_t vocab_begin) {
  // The gathered rows of wte (all of it at most), the ids, the output.
  const double gathered = bytes(wte, std::min(rows(out), rows(wte)) * cols(wte));
  around(op_call("embedding_forward", 0, bytes(tokens) + gathered + bytes(out), out),
         [&] { inner_.embedding_forward(tokens, wte, out, vocab_begin); });
}
void ForwardingBackend::embedding_backward(const Tensor& tokens, const Tensor& dout,
                                           const Tensor& dwte, bool accumulate,
                                           std::int64_t vocab_begin) {
  // Overwriting writes all of dwte (rows no id names become 0); accumulating reads and writes
  // the rows the ids name.
  const double grad = accumulate
                          ? 2 * bytes(dwte, std::min(rows(dout), rows(dwte)) * cols(dwte))
                          : bytes(dwte);
  around(op_call("embedding_backward", 0, bytes(tokens) + bytes(dout) + grad, dout),
         [&] { inner_.embedding_backward(tokens, dout, dwte, accumulate, vocab_begin); });
}
void ForwardingBackend::position_embedding_forward(const Tensor& x, const Tensor& wpe,
                                                   std::int64_t seq, std::int64_t first_row) {
  const double moved = 2 * bytes(x) + bytes(wpe, std::min(rows(x), seq) * cols(wpe));
  around(op_call("embedding_forward", 0, moved, x),
         [&] { inner_.position_embedding_forward(x, wpe, seq, first_row); });
}
void ForwardingBackend::position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                                    std::int64_t seq, bool accumulate,
                                                    std::int64_t first_row) {
  const double grad =
      accumulate ? 2 * bytes(dwpe, std::min(rows(dx), seq) * cols(dwpe)) : bytes(dwpe);
  around(op_call("embedding_backward", 0, bytes(dx) + grad, dx),
         [&] { inner_.position_embedding_backward(dx, dwpe, seq, accumulate, first_row); });
}
// The cross-entropy passes read the valid columns of the logits only.
void ForwardingBackend::softmax_row_max(const Tensor& logits, std::int64_t valid,
                                        const Tensor& row_max) {
  const double moved = bytes(logits, rows(logits) * valid) + bytes(row_max);
  around(op_call("cross_entropy", 0, moved, logits),
         [&] { inner_.softmax_row_max(logits, valid, row_max); });
}
void ForwardingBackend::softmax_row_sum(const Tensor& logits, std::int64_t valid,
                                        const Tensor& row_max, const Tensor& targets,
                                        std::int64_t col_begin, const Tensor& row_sum,
                                        const Tensor& target_logit, bool store_exp) {
  const double moved = bytes(logits, rows(logits) * valid) * (store_exp ? 2 : 1) +
                       bytes(row_max) + bytes(targets) + bytes(row_sum) + bytes(target_logit);
  around(op_call("cross_entropy", 0, moved, logits), [&] {
    inner_.softmax_row_sum(logits, valid, row_max, targets, col_begin, row_sum, target_logit,
                           store_exp);
  });
}
void ForwardingBackend::cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                             const Tensor& row_max, const Tensor& row_sum,
                                             const Tensor& target_logit, const Tensor& targets,
                                             std::int64_t col_begin, const Tensor& loss_sum,
                                             bool backward, double grad_scale) {
  // Backward reads the valid columns and writes every column (padding becomes 0).
  const double moved = bytes(row_max) + bytes(row_sum) + bytes(target_logit) + bytes(targets) +
                       2 * bytes(loss_sum) +
                       (backward ? bytes(logits, rows(logits) * valid) + bytes(logits) : 0);
  around(op_call("cross_entropy", 0, moved, logits), [&] {
    inner_.cross_entropy_finish(logits, valid, row_max, row_sum, target_logit, targets, col_begin,
                                loss_sum, backward, grad_scale);
  });
}
// Timed under the three passes' name, so profiles of either path compare row for row.
void ForwardingBackend::cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                                            const Tensor& targets, const Tensor& loss_sum,
                                            bool backward, double grad_scale) {
  // One read of the valid columns; backward writes every column (padding becomes 0).
  const double moved = bytes(logits, rows(logits) * valid) + bytes(targets) + 2 * bytes(loss_sum) +
                       (backward ? bytes(logits) : 0);
  around(op_call("cross_entropy", 0, moved, logits), [&] {
    inner_.cross_entropy_fused(logits, valid, targets, loss_sum, backward, grad_scale);
  });
}
void ForwardingBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  around(op_call("add", 0, bytes(a) + bytes(b) + bytes(out), out),
         [&] { inner_.add(a, b, out); });
}
void ForwardingBackend::add_bias(const Tensor& x, const Tensor& bias) {
  around(op_call("add", 0, 2 * bytes(x) + bytes(bias), x), [&] { inner_.add_bias(x, bias); });
}
void ForwardingBackend::scale(const Tensor& x, double factor) {
  around(op_call("scale", 0, 2 * bytes(x), x), [&] { inner_.scale(x, factor); });
}
void ForwardingBackend::copy(const Tensor& src, const Tensor& dst) {
  around(op_call("copy", 0, bytes(src) + bytes(dst), src), [&] { inner_.copy(src, dst); });
}
void ForwardingBackend::convert(const Tensor& src, const Tensor& dst) {
  around(op_call("convert", 0, bytes(src) + bytes(dst), src), [&] { inner_.convert(src, dst); });
}
void ForwardingBackend::zero(const Tensor& x) {
  around(op_call("zero", 0, bytes(x), x), [&] { inner_.zero(x); });
}
void ForwardingBackend::sum_squares(const Tensor& x, const Tensor& sum) {
  around(op_call("sum_squares", 0, bytes(x) + 2 * bytes(sum), x),
         [&] { inner_.sum_squares(x, sum); });
}
// A multi-range op is one call of its own kind ("adamw_multi", "sum_squares_multi": a profile
// tells which path ran) over all the ranges' elements (dims: their number), moving what the
// single-range op's calls on every range would move, so its roofline floor is theirs.
void ForwardingBackend::sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) {
  double moved = 2 * bytes(sum);
  std::int64_t n = 0;
  for (const Tensor& x : xs) {
    moved += bytes(x);
    n += x.numel();
  }
  around(OpCall{"sum_squares_multi", 0, moved, Shape{n}, xs.empty() ? DType::f32 : xs.front().dtype},
         [&] { inner_.sum_squares_multi(xs, sum); });
}
void ForwardingBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                                   const Tensor& v, const AdamWHyper& h,
                                   const Tensor* working_copy) {
  around(op_call("adamw", 0, adamw_bytes(param, grad, m, v, working_copy), param),
         [&] { inner_.adamw_step(param, grad, m, v, h, working_copy); });
}
void ForwardingBackend::adamw_step_multi(std::span<const AdamWRange> ranges,
                                         const AdamWHyper& h) {
  double moved = 0;
  std::int64_t n = 0;
  for (const AdamWRange& r : ranges) {
    moved += adamw_bytes(r.param, r.grad, r.m, r.v,
                         r.working_copy.empty() ? nullptr : &r.working_copy);
    n += r.param.numel();
  }
  const DType dtype = ranges.empty() ? DType::f32 : ranges.front().param.dtype;
  around(OpCall{"adamw_multi", 0, moved, Shape{n}, dtype},
         [&] { inner_.adamw_step_multi(ranges, h); });
}

void ForwardingBackend::lion_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                                  const LionHyper& h, const Tensor* working_copy) {
  around(op_call("lion", 0, lion_bytes(param, grad, m, working_copy), param),
         [&] { inner_.lion_step(param, grad, m, h, working_copy); });
}

}  // namespace kintsugi
