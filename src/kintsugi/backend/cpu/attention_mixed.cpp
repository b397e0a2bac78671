// Causal self-attention in mixed precision: the typed kernels' query blocks and row bodies
// (attention_common.hpp) around GEMMs done by one of two engines:
//   Bf16Engine (qkv bf16): bf16 x bf16 -> f32 products (gemm_bf16.hpp). A head's keys and
//     values are packed once and serve every query block; the f32 probability and dS blocks are
//     rounded to bf16 before they enter a product; dout of another type is rounded as packed.
//   F32Engine (qkv f32 or f16): the typed kernel's sgemm calls, f16 heads widened to f32 first.
// Scores, softmax, lse and delta are f32. Outputs are computed in f32 and rounded once: out and
// dQ per query block, dK and dV after summing over every block and every query head of a group.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kintsugi/backend/cpu/attention_common.hpp"
#include "kintsugi/backend/cpu/gemm_bf16.hpp"
#include "kintsugi/backend/cpu/mixed_kernels.hpp"

namespace kintsugi::cpu::mixed {

namespace {

using attn::kBlock;
using attn::QkvLayout;
namespace bg = bf16gemm;

// Hands out pieces of a thread's scratch area; with a null base it only adds up the sizes, so
// the same code computes what to reserve and then carves it.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <class T>
  T* take(std::int64_t count) {
    used_ = (used_ + 63) / 64 * 64;
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += static_cast<std::size_t>(count) * sizeof(T);
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// One head's [T, hd] slice of a packed tensor: element (t, d) is data[t * ld + d].
struct HeadView {
  AnyPtr data;
  std::int64_t ld = 0;
  AnyPtr row(std::int64_t t) const { return data.at(t * ld); }
};

std::int64_t even(std::int64_t n) { return n + (n & 1); }

// Rounds rows x cols f32 (leading dimension ld) to bf16 rows of even stride, zero padded.
void round_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                std::uint16_t* dst) {
  const std::int64_t stride = even(cols);
  for (std::int64_t i = 0; i < rows; ++i) {
    narrow(src + i * ld, DType::bf16, dst + i * stride, cols);
    if (cols & 1) dst[i * stride + cols] = 0;
  }
}

class F32Engine {
 public:
  // Scratch only for the heads that need widening: qkv's when it is f16, dout's unless f32.
  F32Engine(Carver& c, std::int64_t T, std::int64_t hd, DType qkv, DType dout) : T_(T), hd_(hd) {
    for (Slot s : {kQ, kK, kV})
      if (qkv != DType::f32) wide_[s] = c.take<float>(T * hd);
    if (dout != DType::f32) wide_[kDout] = c.take<float>(T * hd);
  }

  void prepare_forward(const HeadView& q, const HeadView& k, const HeadView& v) {
    set(kQ, q);
    set(kK, k);
    set(kV, v);
  }
  void prepare_backward(const HeadView& k, const HeadView& v) {
    set(kK, k);
    set(kV, v);
  }
  void prepare_query_head(const HeadView& q, const HeadView& dout) {
    set(kQ, q);
    set(kDout, dout);
  }
  void scores(std::int64_t r0, std::int64_t rows, std::int64_t cols, float scale, float* S) {
    gemm(false, true, rows, cols, hd_, scale, at(kQ, r0), ld_[kQ], p_[kK], ld_[kK], 0.0f, S,
         cols);
  }
  void pv(const float* P, std::int64_t, std::int64_t rows, std::int64_t cols, float* O,
          std::int64_t ldo) {
    gemm(false, false, rows, hd_, cols, 1.0f, P, cols, p_[kV], ld_[kV], 0.0f, O, ldo);
  }
  void dscores(std::int64_t r0, std::int64_t rows, std::int64_t cols, float* dP) {
    gemm(false, true, rows, cols, hd_, 1.0f, at(kDout, r0), ld_[kDout], p_[kV], ld_[kV], 0.0f,
         dP, cols);
  }
  void gradients(std::int64_t r0, std::int64_t rows, std::int64_t cols, float scale,
                 const float* P, const float* dS, float* dq, std::int64_t lddq, float* dk,
                 float* dv, std::int64_t ldkv) {
    gemm(false, false, rows, hd_, cols, scale, dS, cols, p_[kK], ld_[kK], 0.0f, dq, lddq);
    gemm(true, false, cols, hd_, rows, scale, dS, cols, at(kQ, r0), ld_[kQ], 1.0f, dk, ldkv);
    gemm(true, false, cols, hd_, rows, 1.0f, P, cols, at(kDout, r0), ld_[kDout], 1.0f, dv,
         ldkv);
  }

 private:
  enum Slot { kQ, kK, kV, kDout, kSlots };
  // f32 heads are used where they are; others are widened into this slot's scratch.
  void set(Slot s, const HeadView& h) {
    if (h.data.is_f32()) {
      p_[s] = h.data.f32();
      ld_[s] = h.ld;
      return;
    }
    for (std::int64_t t = 0; t < T_; ++t) widen(h.row(t).half(), h.data.dtype, wide_[s] + t * hd_, hd_);
    p_[s] = wide_[s];
    ld_[s] = hd_;
  }
  const float* at(Slot s, std::int64_t r0) const { return p_[s] + r0 * ld_[s]; }

  std::int64_t T_, hd_;
  float* wide_[kSlots] = {};
  const float* p_[kSlots] = {};
  std::int64_t ld_[kSlots] = {};
};

class Bf16Engine {
 public:
  Bf16Engine(Carver& c, std::int64_t T, std::int64_t hd, DType, DType) : T_(T), hd_(hd) {
    kt_ = c.take<std::uint32_t>(bg::packed_b_words(hd, T));
    kn_ = c.take<std::uint32_t>(bg::packed_b_words(T, hd));
    vn_ = c.take<std::uint32_t>(bg::packed_b_words(T, hd));
    vt_ = c.take<std::uint32_t>(bg::packed_b_words(hd, T));
    rows_a_ = c.take<std::uint16_t>(kBlock * even(T));
    rows_b_ = c.take<std::uint16_t>(kBlock * even(hd));
    panels_ = c.take<std::uint32_t>(bg::packed_a_words(T, kBlock));
    right_ = c.take<std::uint32_t>(bg::packed_b_words(kBlock, hd));
  }

  void prepare_forward(const HeadView& q, const HeadView& k, const HeadView& v) {
    q_ = q;
    bg::pack_b(operand(k, true), hd_, T_, kt_);   // op(B) = K^T: scores = Q . K^T
    bg::pack_b(operand(v, false), T_, hd_, vn_);  // op(B) = V:   out = P . V
  }
  void prepare_backward(const HeadView& k, const HeadView& v) {
    bg::pack_b(operand(k, true), hd_, T_, kt_);   // scores = Q . K^T
    bg::pack_b(operand(k, false), T_, hd_, kn_);  // dQ = dS . K
    bg::pack_b(operand(v, true), hd_, T_, vt_);   // dP = dO . V^T
  }
  void prepare_query_head(const HeadView& q, const HeadView& dout) {
    q_ = q;
    dout_ = dout;
  }
  void scores(std::int64_t r0, std::int64_t rows, std::int64_t cols, float scale, float* S) {
    bg::multiply(rows, cols, hd_, scale, left_rows(q_, r0, rows), kt_, bg::pairs(hd_), 0.0f, S,
                 cols);
  }
  void pv(const float* P, std::int64_t, std::int64_t rows, std::int64_t cols, float* O,
          std::int64_t ldo) {
    round_rows(P, cols, rows, cols, rows_a_);
    bg::multiply(rows, hd_, cols, 1.0f, {words(rows_a_), even(cols) / 2, 0}, vn_, bg::pairs(T_),
                 0.0f, O, ldo);
  }
  void dscores(std::int64_t r0, std::int64_t rows, std::int64_t cols, float* dP) {
    bg::multiply(rows, cols, hd_, 1.0f, left_rows(dout_, r0, rows), vt_, bg::pairs(hd_), 0.0f,
                 dP, cols);
  }
  void gradients(std::int64_t r0, std::int64_t rows, std::int64_t cols, float scale,
                 const float* P, const float* dS, float* dq, std::int64_t lddq, float* dk,
                 float* dv, std::int64_t ldkv) {
    const std::int64_t stride = even(cols);
    // dQ = scale * dS . K
    round_rows(dS, cols, rows, cols, rows_a_);
    bg::multiply(rows, hd_, cols, scale, {words(rows_a_), stride / 2, 0}, kn_, bg::pairs(T_),
                 0.0f, dq, lddq);
    // dK += scale * dS^T . Q and dV += P^T . dO: the block's rows are the shared dimension.
    const bg::Left transposed{panels_, 0, bg::pairs(rows)};
    bg::pack_a({rows_a_, DType::bf16, stride, true}, cols, rows, panels_);
    bg::pack_b(operand(q_, false).at(r0, 0), rows, hd_, right_);
    bg::multiply(cols, hd_, rows, scale, transposed, right_, bg::pairs(rows), 1.0f, dk, ldkv);
    round_rows(P, cols, rows, cols, rows_a_);
    bg::pack_a({rows_a_, DType::bf16, stride, true}, cols, rows, panels_);
    bg::pack_b(operand(dout_, false).at(r0, 0), rows, hd_, right_);
    bg::multiply(cols, hd_, rows, 1.0f, transposed, right_, bg::pairs(rows), 1.0f, dv, ldkv);
  }

 private:
  static bg::Operand operand(const HeadView& h, bool trans) {
    return {h.data.data, h.data.dtype, h.ld, trans};
  }
  static const std::uint32_t* words(const std::uint16_t* p) {
    return reinterpret_cast<const std::uint32_t*>(p);
  }
  // Rows [r0, r0 + rows) of a head as the left operand: in place when they are bf16 words,
  // else rounded (f32, f16) or realigned into scratch rows.
  bg::Left left_rows(const HeadView& h, std::int64_t r0, std::int64_t rows) {
    const AnyPtr first = h.row(r0);
    if (h.data.dtype == DType::bf16 && hd_ % 2 == 0 && h.ld % 2 == 0 &&
        reinterpret_cast<std::uintptr_t>(first.data) % 4 == 0)
      return {static_cast<const std::uint32_t*>(first.data), h.ld / 2, 0};
    const std::int64_t stride = even(hd_);
    for (std::int64_t i = 0; i < rows; ++i) {
      std::uint16_t* out = rows_b_ + i * stride;
      convert_n(h.row(r0 + i).data, h.data.dtype, out, DType::bf16, hd_);
      if (hd_ & 1) out[hd_] = 0;
    }
    return {words(rows_b_), stride / 2, 0};
  }

  std::int64_t T_, hd_;
  std::uint32_t *kt_, *kn_, *vn_, *vt_;  // packed keys and values, once per kv head
  std::uint16_t* rows_a_;                // probabilities / dS of a block, bf16 rows
  std::uint16_t* rows_b_;                // query or dout rows realigned to bf16 words
  std::uint32_t* panels_;                // a transposed block, packed as left operand
  std::uint32_t* right_;                 // a block of Q or dO, packed as right operand
  HeadView q_, dout_;
};

// Scratch of the driver loops, beside the engine's.
struct ForwardScratch {
  float* scores;
  float* out_rows = nullptr;  // an output block in f32 when `out` is not f32
  ForwardScratch(Carver& c, std::int64_t T, std::int64_t hd, DType out)
      : scores(c.take<float>(kBlock * T)) {
    if (out != DType::f32) out_rows = c.take<float>(kBlock * hd);
  }
};

template <class Engine>
void forward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse, ThreadWorkspace& ws) {
  const QkvLayout L(s);
  const std::int64_t H = s.heads, hd = s.head_dim, Tn = s.seq, ld = L.row_stride;
  const std::int64_t out_ld = H * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  Carver measure(nullptr);
  Engine{measure, Tn, hd, qkv.dtype, DType::f32};
  ForwardScratch{measure, Tn, hd, out.dtype};
  const std::size_t stride = ws.reserve(measure.used());
#pragma omp parallel
  {
    Carver carve(ws.base() + stride * omp_get_thread_num());
    Engine engine(carve, Tn, hd, qkv.dtype, DType::f32);
    ForwardScratch scratch(carve, Tn, hd, out.dtype);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < s.batch * H; ++bh) {
      const std::int64_t b = bh / H, h = bh % H, kvh = h / L.group;
      engine.prepare_forward({qkv.at(L.q(b, h)), ld}, {qkv.at(L.k(b, kvh)), ld},
                             {qkv.at(L.v(b, kvh)), ld});
      const HeadView o{out.at(b * Tn * out_ld + h * hd), out_ld};
      const AnyPtr row_lse = lse.at((b * H + h) * Tn);
      const float slope = static_cast<float>(attn::head_slope(s, h));
      // A sliding window (AttentionShape::window) is applied by first_key's mask only: the
      // engines multiply a block against every key before it (the bf16 panels of K and V are
      // packed once per head from key 0), so unlike the typed kernels these do not skip the
      // keys outside the window.
      for (std::int64_t r0 = 0; r0 < Tn; r0 += kBlock) {
        const std::int64_t rows = std::min(kBlock, Tn - r0), cols = r0 + rows;
        engine.scores(r0, rows, cols, scale, scratch.scores);
        for (std::int64_t i = 0; i < rows; ++i) {
          const std::int64_t first = attn::first_key(s, b, r0 + i);
          attn::add_alibi_row(scratch.scores + i * cols, first, r0 + i, slope);
          row_lse.set(r0 + i, attn::softmax_causal_row(scratch.scores + i * cols, first,
                                                       r0 + i + 1, cols));
        }
        if (out.is_f32()) {
          engine.pv(scratch.scores, r0, rows, cols, o.row(r0).f32(), out_ld);
        } else {
          engine.pv(scratch.scores, r0, rows, cols, scratch.out_rows, hd);
          for (std::int64_t i = 0; i < rows; ++i)
            narrow(scratch.out_rows + i * hd, out.dtype, o.row(r0 + i).half(), hd);
        }
      }
    }
  }
}

struct BackwardScratch {
  float *P, *dP, *delta, *lse, *staged;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // f32 gradients when dqkv is not f32
  BackwardScratch(Carver& c, std::int64_t T, std::int64_t hd, DType dqkv)
      : P(c.take<float>(kBlock * T)),
        dP(c.take<float>(kBlock * T)),
        delta(c.take<float>(T)),
        lse(c.take<float>(T)),
        staged(c.take<float>(2 * hd)) {
    if (dqkv == DType::f32) return;
    dq = c.take<float>(kBlock * hd);
    dk = c.take<float>(T * hd);
    dv = c.take<float>(T * hd);
  }
};

template <class Engine>
void backward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse, AnyPtr dout,
              AnyPtr dqkv, ThreadWorkspace& ws) {
  const QkvLayout L(s);
  const std::int64_t H = s.heads, hd = s.head_dim, Tn = s.seq, ld = L.row_stride;
  const std::int64_t out_ld = H * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  Carver measure(nullptr);
  Engine{measure, Tn, hd, qkv.dtype, dout.dtype};
  BackwardScratch{measure, Tn, hd, dqkv.dtype};
  const std::size_t stride = ws.reserve(measure.used());
  const bool direct = dqkv.is_f32();  // gradients accumulate in dqkv itself
#pragma omp parallel
  {
    Carver carve(ws.base() + stride * omp_get_thread_num());
    Engine engine(carve, Tn, hd, qkv.dtype, dout.dtype);
    BackwardScratch scratch(carve, Tn, hd, dqkv.dtype);
    // Query heads that share a key/value head write the same dK/dV, so threads own (b, kv head).
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bk = 0; bk < s.batch * s.kv_heads; ++bk) {
      const std::int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
      const HeadView dk_out{dqkv.at(L.k(b, kvh)), ld}, dv_out{dqkv.at(L.v(b, kvh)), ld};
      float* dk = direct ? dk_out.data.f32() : scratch.dk;
      float* dv = direct ? dv_out.data.f32() : scratch.dv;
      const std::int64_t ldkv = direct ? ld : hd;
      for (std::int64_t t = 0; t < Tn; ++t)
        for (std::int64_t d = 0; d < hd; ++d) dk[t * ldkv + d] = dv[t * ldkv + d] = 0;
      engine.prepare_backward({qkv.at(L.k(b, kvh)), ld}, {qkv.at(L.v(b, kvh)), ld});
      for (std::int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
        const HeadView o{out.at(b * Tn * out_ld + h * hd), out_ld};
        const HeadView dout_h{dout.at(b * Tn * out_ld + h * hd), out_ld};
        const HeadView dq_out{dqkv.at(L.q(b, h)), ld};
        engine.prepare_query_head({qkv.at(L.q(b, h)), ld}, dout_h);
        const AnyPtr row_lse = lse.at((b * H + h) * Tn);
        const float slope = static_cast<float>(attn::head_slope(s, h));
        for (std::int64_t t = 0; t < Tn; ++t) {
          scratch.delta[t] = attn::dot_row(read_f32(dout_h.row(t), hd, scratch.staged),
                                           read_f32(o.row(t), hd, scratch.staged + hd), hd);
          scratch.lse[t] = row_lse.get(t);
        }
        for (std::int64_t r0 = 0; r0 < Tn; r0 += kBlock) {
          const std::int64_t rows = std::min(kBlock, Tn - r0), cols = r0 + rows;
          engine.scores(r0, rows, cols, scale, scratch.P);
          engine.dscores(r0, rows, cols, scratch.dP);
          for (std::int64_t i = 0; i < rows; ++i) {
            const std::int64_t first = attn::first_key(s, b, r0 + i);
            attn::add_alibi_row(scratch.P + i * cols, first, r0 + i, slope);
            attn::probs_and_dscores_row(scratch.P + i * cols, scratch.dP + i * cols, first,
                                        r0 + i + 1, cols, scratch.lse[r0 + i],
                                        scratch.delta[r0 + i]);
          }
          float* dq = direct ? dq_out.row(r0).f32() : scratch.dq;
          engine.gradients(r0, rows, cols, scale, scratch.P, scratch.dP, dq, direct ? ld : hd, dk,
                           dv, ldkv);
          if (!direct)
            for (std::int64_t i = 0; i < rows; ++i)
              narrow(scratch.dq + i * hd, dqkv.dtype, dq_out.row(r0 + i).half(), hd);
        }
      }
      if (!direct)
        for (std::int64_t t = 0; t < Tn; ++t) {
          narrow(dk + t * hd, dqkv.dtype, dk_out.row(t).half(), hd);
          narrow(dv + t * hd, dqkv.dtype, dv_out.row(t).half(), hd);
        }
    }
  }
}

}  // namespace

void attention_forward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                       ThreadWorkspace& ws) {
  if (qkv.dtype == DType::bf16)
    forward<Bf16Engine>(s, qkv, out, lse, ws);
  else
    forward<F32Engine>(s, qkv, out, lse, ws);
}

void attention_backward(const AttentionShape& s, AnyPtr qkv, AnyPtr out, AnyPtr lse,
                        AnyPtr dout, AnyPtr dqkv, ThreadWorkspace& ws) {
  if (qkv.dtype == DType::bf16)
    backward<Bf16Engine>(s, qkv, out, lse, dout, dqkv, ws);
  else
    backward<F32Engine>(s, qkv, out, lse, dout, dqkv, ws);
}

}  // namespace kintsugi::cpu::mixed
