#include "kintsugi/model/lm_head.hpp"

#include <algorithm>

namespace kintsugi {

namespace {
// Upper bound on one chunk of logits. Large enough that the head's GEMMs stay efficient
// (>= 1300 rows for GPT-2's vocabulary), small enough to keep big batches in memory.
constexpr std::int64_t kLogitsChunkBytes = 256ll << 20;
}  // namespace

LmHead::LmHead(LayerContext& ctx, const ModelConfig& c, int tied_embedding_param)
    : ctx_(ctx),
      vocab_(c.vocab_size),
      padded_vocab_(c.padded_vocab()),
      d_(c.d_model),
      wte_(tied_embedding_param),
      norm_(ctx, "final_norm", c.d_model, c.norm_eps) {}

void LmHead::allocate(int slots, std::int64_t rows) {
  const DType dt = ctx_.dtype;
  rows_ = rows;
  const std::int64_t row_bytes = padded_vocab_ * static_cast<std::int64_t>(size_of(dt));
  chunk_rows_ = std::clamp<std::int64_t>(kLogitsChunkBytes / row_bytes, 1, rows);
  saved_.assign(slots, {});
  storage_.clear();
  for (Saved& s : saved_)
    storage_.push_back(carve(ctx_.backend, MemoryKind::activations, [&](Carver& c) {
      s.norm = c.take(dt, {rows, d_});
      s.mean = c.take(dt, {rows});
      s.rstd = c.take(dt, {rows});
      s.d_norm = c.take(dt, {rows, d_});
    }));
  workspace_ = carve(ctx_.backend, MemoryKind::workspace,
                     [&](Carver& c) { logits_ = c.take(dt, {chunk_rows_, padded_vocab_}); });
  losses_.assign(static_cast<std::size_t>(rows), 0.0);
}

void LmHead::norm_forward(int slot, const Tensor& x) {
  Saved& s = saved_[slot];
  norm_.forward(x, s.norm, s.mean, s.rstd);
}

double LmHead::forward_backward(int slot, const Tensor& x, const std::int32_t* targets,
                                double grad_scale) {
  norm_forward(slot, x);
  Saved& s = saved_[slot];
  Backend& be = ctx_.backend;
  ParamStore& p = ctx_.params;
  const Tensor wte = p.param(wte_);
  double loss = 0;
  for (std::int64_t r0 = 0; r0 < rows_; r0 += chunk_rows_) {
    const std::int64_t n = std::min(chunk_rows_, rows_ - r0);
    Tensor logits = logits_.rows(0, n);
    Tensor norm = s.norm.rows(r0, n);
    be.linear_forward(norm, wte, nullptr, logits);
    be.cross_entropy_forward_backward(logits, targets + r0, vocab_, losses_.data() + r0,
                                      grad_scale);
    be.linear_backward_input(logits, wte, s.d_norm.rows(r0, n), false);
    be.linear_backward_weight(logits, norm, p.grad(wte_), nullptr, p.accumulate_grad(wte_));
  }
  for (std::int64_t r = 0; r < rows_; ++r) loss += losses_[r];
  return loss;
}

void LmHead::backward(int slot, const Tensor& x, const Tensor& d_residual) {
  Saved& s = saved_[slot];
  ctx_.backend.zero(d_residual);
  norm_.backward(s.d_norm, x, s.mean, s.rstd, d_residual);
}

double LmHead::forward_loss(int slot, const Tensor& x, const std::int32_t* targets) {
  norm_forward(slot, x);
  Saved& s = saved_[slot];
  const Tensor wte = ctx_.params.param(wte_);
  double loss = 0;
  for (std::int64_t r0 = 0; r0 < rows_; r0 += chunk_rows_) {
    const std::int64_t n = std::min(chunk_rows_, rows_ - r0);
    Tensor logits = logits_.rows(0, n);
    ctx_.backend.linear_forward(s.norm.rows(r0, n), wte, nullptr, logits);
    ctx_.backend.cross_entropy_forward(logits, targets + r0, vocab_, losses_.data() + r0);
  }
  for (std::int64_t r = 0; r < rows_; ++r) loss += losses_[r];
  return loss;
}

void LmHead::logits(int slot, const Tensor& x, std::int64_t row, float* out) {
  norm_forward(slot, x);
  Tensor logits = logits_.rows(0, 1);
  ctx_.backend.linear_forward(saved_[slot].norm.rows(row, 1), ctx_.params.param(wte_), nullptr,
                              logits);
  for (std::int64_t j = 0; j < vocab_; ++j) {
    out[j] = logits.dtype == DType::f32 ? logits.as<float>()[j]
                                        : static_cast<float>(logits.as<double>()[j]);
  }
}

}  // namespace kintsugi
