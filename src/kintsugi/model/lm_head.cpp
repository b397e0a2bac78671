#include "kintsugi/model/lm_head.hpp"

#include <algorithm>

#include "kintsugi/core/host_io.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {

namespace {
// Upper bound on one chunk of logits on the CPU (and on every device with
// KINTSUGI_FUSED_LOSS=0, as before): large enough that the head's GEMMs stay efficient (>= 1300
// rows of f32 logits for GPT-2's vocabulary), small enough to keep big batches in memory.
constexpr std::int64_t kLogitsChunkBytes = 256ll << 20;
// On a GPU: each chunk past the first re-reads and re-writes the f32 embedding gradient
// (50304 x 768 x 4 B = 155 MB for GPT-2, 0.3 GB of traffic) in the weight-gradient GEMM, and the
// input-gradient GEMM's output [chunk rows, d] needs thousands of rows to give every SM a tile
// (1334 rows x 768 are 66 tiles of 128 x 128 for 132 SMs; not yet timed). GPT-2 124M at B = 32
// (32768 rows) then runs 4 chunks of 8192 rows: 824 MB of bf16 logits, where f32 chunks of 1334
// rows took 256 MiB plus 128 MiB of bf16 copies made by the mixed-type GEMMs (gemm.cpp), against
// a peak of 12.1 GiB (docs/gpu.md).
constexpr std::int64_t kGpuLogitsChunkBytes = 1ll << 30;

// KINTSUGI_FUSED_LOSS=0 restores the loss as it was: f32 logits and the three passes on every
// layout, for comparing the two on one GPU.
bool fused_loss_enabled() { return Switches::process().on(Switch::fused_loss); }
}  // namespace

namespace {
// The head's weight: the chunk's token embedding, a tied copy of it (the embedding lives in
// another pipeline stage), or with untied embeddings (Llama) a matrix of its own, split by
// vocabulary rows like the embedding.
int head_weight(LayerContext& ctx, const ModelConfig& c, int existing) {
  ParamSpec spec = token_embedding_spec(ctx.tp, c.vocab_size, c.padded_vocab(ctx.tp.size()),
                                        c.d_model, c.init_std);
  if (!c.tied_embeddings()) {
    spec.name = "head.weight";
    return ctx.params.add(spec);
  }
  if (existing >= 0) return existing;
  spec.tied_copy = true;
  return ctx.params.add(spec);
}
}  // namespace

LmHead::LmHead(LayerContext& ctx, const ModelConfig& c, int tied_embedding_param)
    : ctx_(ctx),
      vocab_(c.vocab_size),
      d_(c.d_model),
      wte_(head_weight(ctx, c, tied_embedding_param)),
      norm_(ctx, "final_norm", c.d_model, c.norm_eps, c.rms_norm()) {
  vocab_begin_ = ctx.params.entry(wte_).spec.split_begin;
  local_vocab_ = c.padded_vocab(ctx.tp.size()) / ctx.tp.size();
  local_valid_ = std::clamp<std::int64_t>(c.vocab_size - vocab_begin_, 0, local_vocab_);
  // Logits in the compute type, as PyTorch autocast and llm.c keep them: the head's three GEMMs
  // are then 16-bit GEMMs throughout under mixed precision, and the loss reads half the bytes.
  // The softmax statistics and the loss stay f32 whatever the logits' type.
  const bool new_loss = fused_loss_enabled();
  logits_dtype_ = new_loss ? ctx.dtype : ctx.statistics();
  // A vocabulary-parallel rank holds a slice of each row: its statistics are all-reduced between
  // the three passes.
  fused_ = new_loss && ctx.tp.size() == 1;
  KINTSUGI_ASSERT(!fused_ || vocab_begin_ == 0);
  chunk_budget_ =
      new_loss && ctx.backend.device() != Device::cpu ? kGpuLogitsChunkBytes : kLogitsChunkBytes;
}

void LmHead::allocate(ActivationPool& pool, std::int64_t rows) {
  const DType dt = ctx_.dtype;
  const TensorParallel& tp = ctx_.tp;
  const std::int64_t local = tp.local_rows(rows);
  rows_ = rows;
  const std::int64_t row_bytes = local_vocab_ * static_cast<std::int64_t>(size_of(logits_dtype_));
  chunk_rows_ = std::clamp<std::int64_t>(chunk_budget_ / row_bytes, 1, rows);
  if (fused_loss_enabled()) {  // chunks of equal size: as few rows each as that many chunks need
    const std::int64_t chunks = (rows + chunk_rows_ - 1) / chunk_rows_;
    chunk_rows_ = (rows + chunks - 1) / chunks;
  }
  saved_.assign(pool.slots(), {});
  for (int k = 0; k < pool.slots(); ++k)
    pool.carve(k, "head", [&](Carver& c) {
      Saved& s = saved_[k];
      s.norm = c.take(dt, {local, d_});
      if (!norm_.rms()) s.mean = c.take(ctx_.statistics(), {local});  // RMSNorm keeps none
      s.rstd = c.take(ctx_.statistics(), {local});
      s.d_norm = c.take(dt, {local, d_});
    });
  workspace_ = carve(ctx_.backend, MemoryKind::workspace, [&](Carver& c) {
    logits_ = c.take(logits_dtype_, {chunk_rows_, local_vocab_});
    if (!fused_) {  // the three passes' row statistics
      row_max_ = c.take(ctx_.statistics(), {chunk_rows_});
      row_stats_ = c.take(ctx_.statistics(), {2, chunk_rows_});
    }
    // Generation's logits of one row stay f32 (f64 in f64 runs): rounding them buys nothing.
    row_logits_ = c.take(ctx_.statistics(), {1, local_vocab_});
    if (tp.sequence_parallel()) {
      full_ = c.take(dt, {rows, d_});
      d_full_ = c.take(dt, {rows, d_});
    }
    loss_sum_ = c.take(DType::f64, {1});
  });
}

Tensor LmHead::norm_forward(int slot, const Tensor& x) {
  Saved& s = saved_[slot];
  norm_.forward(x, s.norm, s.mean, s.rstd);
  const Tensor full = ctx_.tp.sequence_parallel() ? full_ : s.norm;
  ctx_.tp.enter(s.norm, full);
  return full;
}

void LmHead::chunk(const Tensor& norm_full, std::int64_t r0, std::int64_t n,
                   const Tensor& targets, bool backward, double grad_scale,
                   const Tensor& d_full) {
  Backend& be = ctx_.backend;
  ParamStore& p = ctx_.params;
  const Tensor wte = p.param(wte_);
  const Tensor logits = logits_.rows(0, n), x = norm_full.rows(r0, n);
  const Tensor chunk_targets = targets.rows(r0, n);
  be.linear_forward(x, wte, nullptr, logits);
  if (fused_) {
    be.cross_entropy_fused(logits, local_valid_, chunk_targets, loss_sum_, backward, grad_scale);
  } else {
    three_pass_loss(logits, chunk_targets, backward, grad_scale);
  }
  if (backward) {
    be.linear_backward_input(logits, wte, d_full.rows(r0, n), false);
    be.linear_backward_weight(logits, x, p.grad(wte_), nullptr, p.accumulate_grad(wte_));
  }
}

void LmHead::three_pass_loss(const Tensor& logits, const Tensor& chunk_targets, bool backward,
                             double grad_scale) {
  Backend& be = ctx_.backend;
  Communicator* tp = ctx_.tp.group();
  const std::int64_t n = logits.shape[0];
  const Tensor row_max = row_max_.reshaped({chunk_rows_}).rows(0, n);
  // The two statistics summed across ranks travel in one all-reduce.
  const Tensor stats = row_stats_.reshaped({2, chunk_rows_});
  const DType st = ctx_.statistics();
  const Tensor row_sum{stats.data, st, {n}, stats.device};
  const Tensor target_logit{static_cast<std::byte*>(stats.data) + n * size_of(st), st, {n},
                            stats.device};
  const Tensor both{stats.data, st, {2 * n}, stats.device};

  be.softmax_row_max(logits, local_valid_, row_max);
  if (tp) tp->all_reduce(row_max, ReduceOp::max);
  be.softmax_row_sum(logits, local_valid_, row_max, chunk_targets, vocab_begin_, row_sum,
                     target_logit, backward);
  if (tp) tp->all_reduce(both);
  be.cross_entropy_finish(logits, local_valid_, row_max, row_sum, target_logit, chunk_targets,
                          vocab_begin_, loss_sum_, backward, grad_scale);
}

void LmHead::forward_backward(int slot, const Tensor& x, const Tensor& targets,
                              double grad_scale) {
  const Tensor full = norm_forward(slot, x);
  Saved& s = saved_[slot];
  const Tensor d_full = ctx_.tp.sequence_parallel() ? d_full_ : s.d_norm;
  for (std::int64_t r0 = 0; r0 < rows_; r0 += chunk_rows_)
    chunk(full, r0, std::min(chunk_rows_, rows_ - r0), targets, true, grad_scale, d_full);
  // The input gradient is a partial sum over the ranks' vocabulary slices.
  ctx_.tp.enter_backward(d_full, s.d_norm);
}

void LmHead::backward(int slot, const Tensor& x, const Tensor& d_residual) {
  Saved& s = saved_[slot];
  ctx_.backend.zero(d_residual);
  norm_.backward(s.d_norm, x, s.mean, s.rstd, d_residual);
}

void LmHead::forward_loss(int slot, const Tensor& x, const Tensor& targets) {
  const Tensor full = norm_forward(slot, x);
  for (std::int64_t r0 = 0; r0 < rows_; r0 += chunk_rows_)
    chunk(full, r0, std::min(chunk_rows_, rows_ - r0), targets, false, 0.0, Tensor{});
}

void LmHead::logits(int slot, const Tensor& x, std::int64_t row, float* out) {
  KINTSUGI_ASSERT(ctx_.tp.size() == 1);
  // The norm of that row only: generation asks for one row per new token.
  Saved& s = saved_[slot];
  auto one = [row](const Tensor& t) { return t.empty() ? t : t.rows(row, 1); };
  norm_.forward(one(x), one(s.norm), one(s.mean), one(s.rstd));
  const Tensor logits = row_logits_;
  ctx_.backend.linear_forward(one(s.norm), ctx_.params.param(wte_), nullptr, logits);
  // Only the real vocabulary: padding columns are not tokens.
  read_values(logits.reshaped({local_vocab_}).rows(0, vocab_), out);
}

}  // namespace kintsugi
