#pragma once
// The op set every model layer is written against (docs/design.md principle 6). Model and parallel
// code call these ops on raw tensor views and never loop over elements themselves, so another
// backend (CUDA) slots in without touching them.
//
// A backend runs on one device: it allocates there (allocator()) and every tensor it is given
// lives there. Ops are asynchronous by contract: a call enqueues the work on the backend's
// stream and may return before it is done; ops run in call order, and synchronize() waits for
// all of them. The host never reads results of ops directly: scalar results (loss sums, sums of
// squares) are accumulated into small tensors on the device, which the host reads once per step
// through core/host_io.hpp (whose copies are ordered after the ops before them). The CPU backend
// finishes every op before returning.
//
// Conventions: tensors are row-major; a "matrix" [rows, cols] is any tensor whose leading
// dimensions multiply to rows. Linear weights are stored [out, in]. Every op that produces a
// parameter gradient takes `accumulate`: false overwrites (first micro-batch of a step, which
// saves zeroing the gradient buffer), true adds.
//
// Element types: f64 (gradient checks: every tensor of the op f64), or any mix of f32, bf16 and
// f16 (mixed precision: bf16/f16 parameters, activations and the LM head's logits, f32
// gradients, master weights and softmax statistics). Arithmetic is f32 throughout; GEMMs run in
// bf16 with f32 accumulation when an operand is bf16, in f32 otherwise; results are rounded to
// each output tensor's type.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kintsugi/backend/alibi.hpp"
#include "kintsugi/backend/moe_routing.hpp"
#include "kintsugi/backend/rotary.hpp"
#include "kintsugi/backend/op_call.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/core/tensor.hpp"
#include "kintsugi/core/trace.hpp"

namespace kintsugi {

// Shape of a causal self-attention call. The packed qkv activation is laid out
// [batch, seq, kv_heads, heads/kv_heads + 2, head_dim]: for each kv head, its group of query
// heads, then its key, then its value. With kv_heads == heads (GPT-2) that is [B, T, H, 3, hd],
// so splitting heads across tensor-parallel ranks is a contiguous split of the qkv weight rows.
struct AttentionShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  // ALiBi (BLOOM): with alibi_heads > 0, query i's score against key j gets
  // slope(head_begin + h, alibi_heads) * (j - i), h being the local head: a tensor-parallel rank
  // passes the model's head count and the global index of its first head, so every head keeps
  // its own slope whichever rank computes it.
  std::int64_t alibi_heads = 0, head_begin = 0;
  // RoPE: row t of each sequence is position first_position + t (generation rotates the one
  // new row of a key/value cache).
  std::int64_t first_position = 0;
  // Document attention (data.document_attention): i32 [batch * seq] in the backend's memory,
  // for each row the index (within its sequence) of its document's first row; query t sees
  // keys doc_start[t]..t only, and RoPE rotates it as position t - doc_start[t]. Null: one
  // document per sequence. RoPE reads nothing else of it, so a caller may give RoPE any row
  // offsets (context parallelism's ring: a rank's row index less its position, negative too).
  const std::int32_t* doc_start = nullptr;
  // Sliding-window attention (model.sliding_window, Mistral): with window W > 0, query t sees
  // only the keys t - W + 1..t (itself and the W - 1 before it; key j iff 0 <= t - j < W), in
  // the sequence's rows, which with a key/value cache are the absolute positions. With
  // documents, keys max(doc_start[t], t - W + 1)..t. 0: the whole causal context.
  std::int64_t window = 0;
};

// One block of ring attention (context parallelism's ring exchange, docs/parallelism.md,
// "Ring exchange"): some query rows of each sequence against some key/value rows, at their
// positions in the whole sequence, so that a rank attends its rows to the key/value chunks that
// travel the ring one block at a time. With the op's AttentionShape s describing the WHOLE
// sequence (s.seq its length, s.doc_start [batch * s.seq] over it, ALiBi and the window in its
// positions), the tensors hold `rows` rows of each sequence: qkv packed as AttentionShape
// [batch, rows, kv_heads, group + 2, hd], out [batch, rows, heads, hd] and lse
// [batch, heads, rows] for the queries, kv [batch, rows, kv_heads, 2, hd] (each kv head's key,
// then its value) for the keys. Query rows [q_begin, q_begin + q_count) are positions
// q_position.. and key rows [k_begin, k_begin + k_count) positions k_position.., each a run of
// consecutive positions; the masks (causal, documents, window) and ALiBi's distances are those
// positions', so merging the blocks of any split of the keys is attention_forward of the whole.
struct AttentionBlock {
  std::int64_t rows = 0;
  std::int64_t q_begin = 0, q_count = 0, q_position = 0;
  std::int64_t k_begin = 0, k_count = 0, k_position = 0;
};


struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  double grad_scale = 1;  // applied to the gradient first (clipping, loss-scale removal)
  std::int64_t step = 1;  // 1-based, for bias correction
};

// One range of a multi-range AdamW step (Backend::adamw_step_multi): adamw_step's tensors, of
// equal length, and whether the range takes weight decay (biases and norm weights do not).
struct AdamWRange {
  Tensor param, grad, m, v;
  Tensor working_copy;  // empty: none
  bool decay = false;
};

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): one moment and
// the sign of an interpolation as the update; decoupled weight decay as AdamW's.
struct LionHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
  double grad_scale = 1;  // applied to the gradient first (clipping, loss-scale removal)
};

class DeviceBackend;

// The ops' entry points: each op's function checks its shapes and counts its cost (OpCall) in one
// place, its file backend/ops_<group>.cpp, then runs the device backend's implementation
// (DeviceBackend::do_<op>) through dispatch(). A decorator (ForwardingBackend) passes the ops to
// another backend and sees each call at one hook, around(), instead of repeating every op.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  // The device's model name, e.g. the CPU's or GPU's (keys cached measurements).
  virtual std::string hardware() const = 0;
  virtual Allocator& allocator() = 0;
  MemoryTracker& memory() const { return memory_; }
  // Zero-filled memory on this backend's device, tracked under `kind`.
  Buffer allocate(MemoryKind kind, std::size_t bytes) {
    return Buffer(allocator(), memory_, kind, bytes);
  }
  // Waits until every op called so far has finished.
  virtual void synchronize() = 0;
  // The device's own timeline for traces (core/trace.hpp): a GPU's compute stream. Null where
  // ops run as they are called (the CPU).
  virtual DeviceTimeline* timeline() { return nullptr; }

  // ---- dense algebra
  // y[M,N] = x[M,K] . w[N,K]^T (+ bias[N]); accumulate adds to y instead of overwriting it.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                      const Tensor& y, bool accumulate = false);
  // dx[M,K] (+)= dy[M,N] . w[N,K]
  void linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                             bool accumulate);
  // dw[N,K] (+)= dy[M,N]^T . x[M,K];  db[N] (+)= sum over rows of dy
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor* db, bool accumulate);

  // ---- normalization: y = (x - mean) * rstd * w + b over the last dimension
  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y, const Tensor& mean, const Tensor& rstd,
                         double eps);
  // dx += d/dx (accumulates: the residual stream's gradient arrives in dx first)
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                          const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                          const Tensor& dw, const Tensor& db, bool accumulate);

  // ---- RMSNorm (Llama): y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) per row.
  void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                       const Tensor& rstd, double eps);
  // dx += d/dx, like layernorm_backward.
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                        bool accumulate);

  // ---- SwiGLU (Llama's MLP): y = silu(gate) * up, silu(g) = g * sigmoid(g). dgate may alias
  // dy (each element of dy is read before it is overwritten).
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y);
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                       const Tensor& dgate, const Tensor& dup);

  // ---- rotary position embeddings (Llama), in place on the queries and keys of a packed qkv
  // tensor (values untouched). Row t of each sequence is position t; dimension i < hd/2 of a
  // head is paired with i + hd/2 (Hugging Face's rotate_half convention) and rotated by
  // t * table.inv_freq[i], cosine and sine scaled by table.scale (rotary.hpp). inverse applies
  // the transpose: that is the backward applied to a qkv gradient (with scale 1, the rotation
  // back).
  void rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table, bool inverse);
  // Unscaled RoPE of base theta (RotaryTable::plain), for kernels' tests.
  void rope(const AttentionShape& s, const Tensor& qkv, double theta, bool inverse) {
    rope(s, qkv, RotaryTable::plain(theta, s.head_dim), inverse);
  }

  // ---- per-head RMSNorm of queries and keys (Qwen3's q_norm and k_norm), in place on the
  // packed qkv tensor (see AttentionShape; the values are left alone): every query head becomes
  // x * rstd * q_weight and every key head x * rstd * k_weight, rstd = 1 / sqrt(mean(x^2) + eps)
  // over its head_dim elements. q_weight and k_weight [head_dim] have qkv's type; rstd
  // [batch * seq, heads + kv_heads] (statistics' type) gets each head's, in the order of the
  // heads in a row: per kv head its group of queries, then its key.
  void qk_norm_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& q_weight,
                       const Tensor& k_weight, const Tensor& rstd, double eps);
  // pre: the qkv forward normalized (its query and key heads before the norm; its values are not
  // read). d_qkv's query and key heads hold the gradient of the normalized heads and are
  // overwritten with that of pre's (its values untouched); dq_weight and dk_weight (statistics'
  // type) accumulate the weights' gradients, summed over rows in order, then over the heads of a
  // row in order.
  void qk_norm_backward(const AttentionShape& s, const Tensor& pre, const Tensor& q_weight,
                        const Tensor& k_weight, const Tensor& rstd, const Tensor& d_qkv,
                        const Tensor& dq_weight, const Tensor& dk_weight);

  // ---- activations: GELU, tanh approximation. dx may alias dy.
  void gelu_forward(const Tensor& x, const Tensor& y);
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

  // ---- a GELU MLP's GEMMs with the activation (GPT-2, BLOOM), where a backend can apply it in
  // the GEMM's epilogue instead of a pass of its own (CUDA: cuBLASLt's, backend/cuda/gemm.hpp).
  // Each equals the ops it replaces, in sequence; pre (the GELU's input, which the model keeps
  // for backward) does not alias the other tensors.
  //   pre[M,N] = x[M,K] . w[N,K]^T (+ bias[N]) as linear_forward, then y = gelu(pre). A fused
  //   epilogue may take the GELU of the product before its rounding to pre's type.
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                           const Tensor& pre, const Tensor& y);
  //   dx[M,K] = gelu'(pre[M,K]) * (dy[M,N] . w[N,K]): linear_backward_input of the layer after
  //   the GELU (overwriting dx), then gelu_backward(pre, dx, dx). A fused epilogue may multiply
  //   the product before its rounding to dx's type.
  void linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                  const Tensor& dx);

  // ---- causal self-attention on packed qkv (see AttentionShape). out [B,T,H,hd];
  // lse [B,H,T] holds each row's log-sum-exp so backward recomputes the probabilities instead
  // of keeping a T x T matrix per head.
  void attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                         const Tensor& lse);
  // dqkv is overwritten.
  void attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dqkv);
  // Generation with a key/value cache: the query of row `position` of each sequence against
  // the keys and values of rows 0..position of the packed qkv `cache` (s.seq is the cache's
  // length, rows after `position` are not read); out [B, H, hd] (one row per sequence). Equals
  // attention_forward's row `position` (queries and keys already rotated with RoPE).
  void attention_decode(const AttentionShape& s, const Tensor& cache,
                        std::int64_t position, const Tensor& out);
  // Ring attention (AttentionBlock): the block's queries against its keys, merged into the
  // running state out/lse of the query rows: each row's block output and log-sum-exp l_b join
  // the running (o, l) as l' = log(e^l + e^l_b), o' = e^(l - l') o + e^(l_b - l') o_b, flash
  // attention's merge, so the blocks of a row merged in any order equal attention_forward's row
  // (within rounding). merge false overwrites instead. A row none of whose keys the masks let
  // it see gets l_b = -inf: it leaves a merged row alone and an overwritten one at out 0,
  // lse -inf (which the next merge replaces). f32 and f64; lse in the statistics type.
  void attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                               const Tensor& qkv, const Tensor& kv, const Tensor& out,
                               const Tensor& lse, bool merge);
  // Its backward, given the FINAL out, lse (every block merged) and dout of the query rows:
  // adds this block's dQ into dqkv's query heads of the query rows (its key and value heads
  // are not touched) and the block's dK, dV into dkv's key rows (laid out as kv). Summed over
  // the blocks of a split this is attention_backward.
  void attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                const Tensor& lse, const Tensor& dout, const Tensor& dqkv,
                                const Tensor& dkv);

  // ---- embeddings. tokens i32 [rows]; out [rows, d] = wte[token - vocab_begin]. Ids outside
  // [vocab_begin, vocab_begin + rows of wte) give zero rows: that is how a vocabulary-parallel
  // shard sees the ids other ranks own.
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& out,
                         std::int64_t vocab_begin = 0);
  void embedding_backward(const Tensor& tokens, const Tensor& dout,
                          const Tensor& dwte, bool accumulate,
                          std::int64_t vocab_begin = 0);
  // Learned positions: x[r] += wpe[(first_row + r) % seq], where first_row is the global row
  // of x's first row (sequence-parallel ranks hold a slice of the rows).
  void position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                  std::int64_t first_row = 0);
  void position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                   std::int64_t seq, bool accumulate,
                                   std::int64_t first_row = 0);

  // ---- loss: softmax cross-entropy in three passes, so that a vocabulary-parallel rank can
  // combine its row statistics with the other ranks' between them. logits [N, C] hold the
  // columns [col_begin, col_begin + C) of the vocabulary; only the first `valid` are real (the
  // rest is padding). targets i32 [N]; targets < 0 are ignored positions (loss 0, no gradient).
  //   row_max[r] = max over valid columns
  void softmax_row_max(const Tensor& logits, std::int64_t valid,
                       const Tensor& row_max);
  //   row_sum[r] = sum exp(logit - row_max[r]); target_logit[r] = the target's logit if it is
  //   one of these columns, else 0. With store_exp the exponentials replace the logits.
  void softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                       const Tensor& targets, std::int64_t col_begin,
                       const Tensor& row_sum, const Tensor& target_logit,
                       bool store_exp);
  //   loss of row r = log(row_sum) + row_max - target_logit; loss_sum (f64 [1]) += the sum of
  //   the rows' losses, added up in row order. With backward (after store_exp), logits become
  //   grad_scale * (softmax - onehot) and padding columns 0.
  void cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                            const Tensor& row_max, const Tensor& row_sum,
                            const Tensor& target_logit, const Tensor& targets,
                            std::int64_t col_begin, const Tensor& loss_sum,
                            bool backward, double grad_scale);
  // The same loss in one op, for logits [N, C] that hold the whole vocabulary (no vocabulary
  // parallelism: column 0 is token 0; the first `valid` columns are real, the rest padding). Per
  // row: its maximum, sum of exponentials and target logit in f32 (f64 for f64 logits) whatever
  // the logits' type, loss_sum (f64 [1]) += the rows' losses added up in row order (the loss of
  // the three passes); with backward the logits become grad_scale * (softmax - onehot) rounded
  // once to their type, padding columns 0. targets < 0: loss 0 and, with backward, a zero row.
  // The logits are read at most twice and written once (the three passes: three reads, two
  // writes, the exponentials rounded to the logits' type in between).
  void cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                           const Tensor& targets, const Tensor& loss_sum, bool backward,
                           double grad_scale);

  // ---- mixture of experts (model/moe_layer.hpp, docs/moe.md). N token rows, E experts, K
  // experts per token, M = N x K routed rows. Every float tensor of these ops has one type, f32
  // or f64 (no mixed precision yet); indices are i32. Sums run in a fixed order (rows, then the
  // K choices of a row in order), so results do not depend on the thread count.
  //   Router: per row of logits [N, E], probs = softmax, lse = log-sum-exp, experts [N, K] the
  //   K largest probabilities' experts in descending order (ties: the lower index first), gates
  //   [N, K] their probabilities, divided by the K's sum with renormalize. losses (f64 [2]) +=
  //   the load-balancing loss E / (N^2 K) sum_e count_e sum_n probs[n, e] (Switch/GShard:
  //   E sum_e f_e P_e, count_e the rows routed to e) and the z-loss (1/N) sum_n lse_n^2.
  void moe_route(const Tensor& logits, std::int64_t top_k, bool renormalize, const Tensor& probs,
                 const Tensor& lse, const Tensor& experts, const Tensor& gates,
                 const Tensor& losses) {
    moe_route(logits, {.top_k = top_k, .renormalize = renormalize}, nullptr, probs, lse, experts,
              gates, losses);
  }
  //   The general router (MoeRouting; docs/moe.md "DeepSeek-style routing"): scores s = the
  //   softmax or each logit's sigmoid; selection scores s + bias (bias f32 [E], null: none)
  //   rank the experts (within the best groups when routing.groups > 1); gates = the chosen
  //   experts' s, divided by their sum with renormalize, times routing.scale. With the sigmoid,
  //   probs holds the logits (backward recomputes the scores and the z-loss's softmax from
  //   them) and the load-balancing loss takes P_e from each row's scores divided by the row's
  //   sum; the z-loss is that of the logits either way.
  void moe_route(const Tensor& logits, const MoeRouting& routing, const Tensor* bias,
                 const Tensor& probs, const Tensor& lse, const Tensor& experts,
                 const Tensor& gates, const Tensor& losses);
  //   d_logits (overwritten) = the gradient of: the gates (d_gates [N, K]) through the scale,
  //   the renormalization and the scores, plus aux_scale x the load-balancing loss (counts held
  //   constant) plus z_scale x the z-loss, from moe_route's saved outputs (the bias and the
  //   groups only select: no gradient).
  void moe_route_backward(const Tensor& probs, const Tensor& lse, const Tensor& experts,
                          const Tensor& gates, const Tensor& d_gates, bool renormalize,
                          double aux_scale, double z_scale, const Tensor& d_logits) {
    moe_route_backward(probs, lse, experts, gates, d_gates, {.renormalize = renormalize},
                       aux_scale, z_scale, d_logits);
  }
  void moe_route_backward(const Tensor& probs, const Tensor& lse, const Tensor& experts,
                          const Tensor& gates, const Tensor& d_gates, const MoeRouting& routing,
                          double aux_scale, double z_scale, const Tensor& d_logits);
  //   The routed rows grouped by expert: order [M] lists the choices n K + j by expert, then row,
  //   then j; position [M] is its inverse (position[n K + j] = where that choice went); counts
  //   i32 [E] the rows of each expert (E = counts' length).
  void moe_dispatch(const Tensor& experts, const Tensor& order, const Tensor& position,
                    const Tensor& counts);
  //   xp [M, d]: row p = x[order[p] / K] (the permutation; K = M / rows of x).
  void moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp);
  //   out [N, d] (+)= sum over j of weights[n, j] x src[position[n K + j]] (weights null: 1),
  //   j in order: the gate-weighted unpermutation, and with no weights the permutation's
  //   backward.
  void moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                   const Tensor& out, bool accumulate);
  //   moe_combine's backward with weights, from dy [N, d]: d_src[p] = weights[c] dy[c / K] with
  //   c = order[p]; d_weights[n, j] = dy[n] . src[position[n K + j]] (both overwritten).
  void moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                            const Tensor& position, const Tensor& weights, const Tensor& d_src,
                            const Tensor& d_weights);
  //   The shared expert's gate (Qwen2-MoE): out [N, d] += sigmoid(logit[n]) x shared[n], logit
  //   [N, 1].
  void moe_shared_gate(const Tensor& logit, const Tensor& shared, const Tensor& out);
  //   d_shared = sigmoid(logit) dy; d_logit[n] = sigmoid'(logit[n]) dy[n] . shared[n]
  //   (overwritten).
  void moe_shared_gate_backward(const Tensor& logit, const Tensor& shared, const Tensor& dy,
                                const Tensor& d_shared, const Tensor& d_logit);

  // ---- elementwise and reductions
  void add(const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b
  void add_bias(const Tensor& x, const Tensor& bias);  // each row of x += bias
  void scale(const Tensor& x, double factor);                     // x *= factor
  void copy(const Tensor& src, const Tensor& dst);  // same dtype and size
  // src [rows, Ws] and dst [rows, Wd], 2-D, of one type (any: f32, f64, bf16, f16, i32, u8) and
  // the same rows: columns [src_col, src_col + cols) of every row of src are copied into
  // columns [dst_col, dst_col + cols) of the same row of dst; dst's other columns are left as
  // they are. The ranges lie inside the rows; cols may be 0. src and dst must not overlap.
  void copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                    std::int64_t dst_col, std::int64_t cols);
  void convert(const Tensor& src, const Tensor& dst);  // same size, any float types
  void zero(const Tensor& x);
  // sum (f64 [1]) += the sum of x's squared elements (in an order that does not depend on the
  // thread count).
  void sum_squares(const Tensor& x, const Tensor& sum);
  // sum_squares of each tensor of xs in turn, bit for bit (each tensor's sum in its own fixed
  // order, then added to sum in the list's order), in a few launches whatever the list's length
  // (the gradient norm over every parameter tensor: parallel/sharded_state.cpp).
  void sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum);

  // ---- optimizer: one AdamW step (decoupled weight decay) over matching flat ranges. param,
  // m and v are f32 (or all f64); with mixed precision `param` is the master copy and
  // working_copy (bf16/f16, same length) receives the updated weights rounded.
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                  const Tensor& v, const AdamWHyper& h,
                  const Tensor* working_copy = nullptr);
  // adamw_step on each range, with h's weight decay where the range's `decay` is set and none
  // elsewhere: the same bits, in a few launches whatever the number of ranges (a model's
  // parameters alternate decayed weights with biases and norm weights; optim/adamw.cpp). The
  // ranges' tensors do not overlap, so they may be updated in any order.
  void adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h);
  // One Lion step over matching flat ranges, with g = grad x grad_scale:
  //   c = beta1 m + (1 - beta1) g;  param = param (1 - lr wd) - lr sign(c);
  //   m = beta2 m + (1 - beta2) g
  // (sign(0) = 0). param and m are f32 (or both f64); with mixed precision `param` is the
  // master copy and working_copy (bf16/f16, same length) receives the updated weights rounded.
  void lion_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                 const LionHyper& h, const Tensor* working_copy = nullptr);

 protected:
  // A device backend (DeviceBackend): its own ops run.
  Backend(MemoryTracker& memory, DeviceBackend& device) : memory_(memory), device_(device) {}
  // A decorator of `inner` (ForwardingBackend): every op runs inner's device backend's
  // implementation, inside this backend's around() and then inner's.
  explicit Backend(Backend* inner)
      : memory_(inner->memory_), inner_(inner), device_(inner->device_) {}
  // Runs one op (run()), described by `call`: a decorator's hook (profiling times it, the
  // tests' device guard opens memory around it). A device backend's is never called.
  virtual void around(const OpCall& call, const std::function<void()>& run) { run(); }

 private:
  // An op once its entry point has checked and costed it: straight to the implementation on a
  // device backend (no std::function, nothing to observe), else through the decorators' hooks.
  template <class Run>
  void dispatch(const OpCall& call, Run&& run) {
    if (!inner_) return run();
    observe(call, std::function<void()>(std::ref(run)));
  }
  // This backend's around(), then each inner decorator's, then run().
  void observe(const OpCall& call, const std::function<void()>& run) {
    if (!inner_) return run();
    auto next = [&] { inner_->observe(call, run); };
    around(call, std::function<void()>(std::ref(next)));
  }

  MemoryTracker& memory_;
  Backend* inner_ = nullptr;  // the backend a decorator passes its ops to; null on a device
  DeviceBackend& device_;     // whose implementations run: this one, or the innermost's
};

// The backend that runs the ops on a device (CpuBackend, CudaBackend): one implementation per
// op, of the same name with do_, whose contract is the op's in Backend above. Backend's entry
// point has checked the shapes of the contract before it calls one, so an implementation checks
// only what is its own: element types its kernels take, the device's limits (the CUDA
// attention's head size). An implementation that needs another op calls its do_ function.
class DeviceBackend : public Backend {
 protected:
  explicit DeviceBackend(MemoryTracker& memory) : Backend(memory, *this) {}

 private:
  friend class Backend;
  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                 const Tensor& y, bool accumulate) = 0;
  virtual void do_linear_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                        bool accumulate) = 0;
  virtual void do_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                         const Tensor* db, bool accumulate) = 0;
  virtual void do_layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                    const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                    double eps) = 0;
  virtual void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                     const Tensor& dw, const Tensor& db, bool accumulate) = 0;
  virtual void do_rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y,
                                  const Tensor& rstd, double eps) = 0;
  virtual void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dw,
                                   bool accumulate) = 0;
  virtual void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) = 0;
  virtual void do_swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dy,
                                  const Tensor& dgate, const Tensor& dup) = 0;
  virtual void do_rope(const AttentionShape& s, const Tensor& qkv, const RotaryTable& table,
                       bool inverse) = 0;
  virtual void do_qk_norm_forward(const AttentionShape& s, const Tensor& qkv,
                                  const Tensor& q_weight, const Tensor& k_weight,
                                  const Tensor& rstd, double eps) = 0;
  virtual void do_qk_norm_backward(const AttentionShape& s, const Tensor& pre,
                                   const Tensor& q_weight, const Tensor& k_weight,
                                   const Tensor& rstd, const Tensor& d_qkv,
                                   const Tensor& dq_weight, const Tensor& dk_weight) = 0;
  virtual void do_gelu_forward(const Tensor& x, const Tensor& y) = 0;
  virtual void do_gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) = 0;
  virtual void do_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const Tensor& pre, const Tensor& y) = 0;
  virtual void do_linear_backward_input_gelu(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                             const Tensor& dx) = 0;
  virtual void do_attention_forward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                    const Tensor& lse) = 0;
  virtual void do_attention_backward(const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                                     const Tensor& lse, const Tensor& dout, const Tensor& dqkv) = 0;
  virtual void do_attention_decode(const AttentionShape& s, const Tensor& cache,
                                   std::int64_t position, const Tensor& out) = 0;
  virtual void do_attention_block_forward(const AttentionShape& s, const AttentionBlock& blk,
                                          const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                          const Tensor& lse, bool merge) = 0;
  virtual void do_attention_block_backward(const AttentionShape& s, const AttentionBlock& blk,
                                           const Tensor& qkv, const Tensor& kv, const Tensor& out,
                                           const Tensor& lse, const Tensor& dout,
                                           const Tensor& dqkv, const Tensor& dkv) = 0;
  virtual void do_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& out,
                                    std::int64_t vocab_begin) = 0;
  virtual void do_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                     bool accumulate, std::int64_t vocab_begin) = 0;
  virtual void do_position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                             std::int64_t first_row) = 0;
  virtual void do_position_embedding_backward(const Tensor& dx, const Tensor& dwpe,
                                              std::int64_t seq, bool accumulate,
                                              std::int64_t first_row) = 0;
  virtual void do_softmax_row_max(const Tensor& logits, std::int64_t valid,
                                  const Tensor& row_max) = 0;
  virtual void do_softmax_row_sum(const Tensor& logits, std::int64_t valid, const Tensor& row_max,
                                  const Tensor& targets, std::int64_t col_begin,
                                  const Tensor& row_sum, const Tensor& target_logit,
                                  bool store_exp) = 0;
  virtual void do_cross_entropy_finish(const Tensor& logits, std::int64_t valid,
                                       const Tensor& row_max, const Tensor& row_sum,
                                       const Tensor& target_logit, const Tensor& targets,
                                       std::int64_t col_begin, const Tensor& loss_sum,
                                       bool backward, double grad_scale) = 0;
  virtual void do_cross_entropy_fused(const Tensor& logits, std::int64_t valid,
                                      const Tensor& targets, const Tensor& loss_sum, bool backward,
                                      double grad_scale) = 0;
  virtual void do_moe_route(const Tensor& logits, const MoeRouting& routing, const Tensor* bias,
                            const Tensor& probs, const Tensor& lse, const Tensor& experts,
                            const Tensor& gates, const Tensor& losses) = 0;
  virtual void do_moe_route_backward(const Tensor& probs, const Tensor& lse,
                                     const Tensor& experts, const Tensor& gates,
                                     const Tensor& d_gates, const MoeRouting& routing,
                                     double aux_scale, double z_scale,
                                     const Tensor& d_logits) = 0;
  virtual void do_moe_dispatch(const Tensor& experts, const Tensor& order, const Tensor& position,
                               const Tensor& counts) = 0;
  virtual void do_moe_gather(const Tensor& x, const Tensor& order, const Tensor& xp) = 0;
  virtual void do_moe_combine(const Tensor& src, const Tensor& position, const Tensor* weights,
                              const Tensor& out, bool accumulate) = 0;
  virtual void do_moe_combine_backward(const Tensor& dy, const Tensor& src, const Tensor& order,
                                       const Tensor& position, const Tensor& weights,
                                       const Tensor& d_src, const Tensor& d_weights) = 0;
  virtual void do_moe_shared_gate(const Tensor& logit, const Tensor& shared,
                                  const Tensor& out) = 0;
  virtual void do_moe_shared_gate_backward(const Tensor& logit, const Tensor& shared,
                                           const Tensor& dy, const Tensor& d_shared,
                                           const Tensor& d_logit) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void do_add_bias(const Tensor& x, const Tensor& bias) = 0;
  virtual void do_scale(const Tensor& x, double factor) = 0;
  virtual void do_copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void do_copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                               std::int64_t dst_col, std::int64_t cols) = 0;
  virtual void do_convert(const Tensor& src, const Tensor& dst) = 0;
  virtual void do_zero(const Tensor& x) = 0;
  virtual void do_sum_squares(const Tensor& x, const Tensor& sum) = 0;
  virtual void do_sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) = 0;
  virtual void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                             const Tensor& v, const AdamWHyper& h, const Tensor* working_copy) = 0;
  virtual void do_adamw_step_multi(std::span<const AdamWRange> ranges, const AdamWHyper& h) = 0;
  virtual void do_lion_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const LionHyper& h, const Tensor* working_copy) = 0;
};

// The backend of `device`: the CPU's always; CUDA's in a build with -DKINTSUGI_CUDA=ON (a
// kintsugi::Error naming the option otherwise, or when no GPU is present).
std::unique_ptr<Backend> make_backend(Device device, MemoryTracker& memory);
std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& memory);

}  // namespace kintsugi
