// Context parallelism's ring exchange (docs/parallelism.md, "Ring exchange"): each rank keeps
// its query rows (chunks r and 2 cp - 1 - r of every sequence, or of every window of it with
// packed documents: ContextParallel::ring_rows) and
// the key/value chunks travel the ring: at step k a rank attends its queries to the keys and
// values of rank r - k, while it sends them on to rank r + 1 and receives rank r - k - 1's
// from rank r - 1 into the second buffer. The blocks merge into the running output and
// log-sum-exp (Backend::attention_block_forward). Backward passes the keys and values around
// again, with the accumulator of their gradient: after cp steps each accumulator has met every
// rank's queries and arrives back at its owner. Under bf16/fp16 the keys and values travel in
// that type while the running output, dQ and the travelling dK/dV accumulators are f32.
#include <fmt/format.h>

#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/context_parallel.hpp"

namespace kintsugi {

namespace {

// The ring's shapes on one rank: its rows of each sequence, the chunks of them (two per window).
struct Ring {
  ContextParallel::RowMap mine;
  std::int64_t rows, chunk;
  int size, rank, windows;
  int chunks() const { return static_cast<int>(mine.first.size()); }
  ContextParallel::RowMap of(const AttentionShape& s, int owner) const {
    return ContextParallel::ring_rows(size, owner, s.seq, windows);
  }
  // The block of this rank's query chunk a against key chunk b of `theirs`, or a block of
  // count 0 when no query of it may see a key of it (causality, the window).
  AttentionBlock block(const AttentionShape& s, const ContextParallel::RowMap& theirs, int a,
                       int b) const {
    AttentionBlock blk{.rows = rows, .q_begin = a * chunk, .q_count = chunk,
                       .q_position = mine.first[a], .k_begin = b * chunk, .k_count = chunk,
                       .k_position = theirs.first[b]};
    const bool after = blk.k_position > blk.q_position + chunk - 1;
    const bool before = s.window > 0 && blk.k_position + chunk - 1 < blk.q_position - s.window + 1;
    if (after || before) blk.q_count = blk.k_count = 0;
    return blk;
  }
};

Ring ring_of(const ContextParallel& cp, const AttentionShape& s, const Tensor& qkv) {
  const ContextParallel::RowMap mine = cp.rows(s.seq);
  KINTSUGI_ASSERT(qkv.shape[0] == s.batch * mine.rows());
  return {mine, mine.rows(), mine.chunk, cp.size(), cp.rank(), cp.windows()};
}

// Each kv head's key and value columns of qkv [rows, width] into kv [rows, kv_heads * 2 hd],
// or (back) kv's into qkv's.
void pack(Backend& be, const AttentionShape& s, const Tensor& qkv, const Tensor& kv, bool back) {
  const std::int64_t group = s.heads / s.kv_heads, hd = s.head_dim;
  for (std::int64_t k = 0; k < s.kv_heads; ++k) {
    const std::int64_t col = (k * (group + 2) + group) * hd;
    if (back) be.copy_columns(kv, k * 2 * hd, qkv, col, 2 * hd);
    else be.copy_columns(qkv, col, kv, k * 2 * hd, 2 * hd);
  }
}

// Where the blocks keep a running sum of `t`'s shape: t itself, or with mixed precision the
// f32 state buffer (ContextParallel::RingBuffers), so that no merge rounds to 16 bits.
Tensor state_view(const ContextParallel::RingBuffers& buffers, const Tensor& t) {
  if (buffers.state.empty()) return t;
  KINTSUGI_ASSERT(buffers.state.numel() >= t.numel());
  return buffers.state.reshaped({buffers.state.numel()}).rows(0, t.numel()).reshaped(t.shape);
}

// A traced span (core/trace.hpp): the ring's transfers on the communication row from their
// start to their completion, its attention blocks on the compute row.
struct Span {
  Tracer* tracer;
  double start;
  explicit Span(Tracer* t) : tracer(t && t->enabled() ? t : nullptr), start(tracer ? tracer->now() : 0) {}
  void end(const std::string& name, int lane) const {
    if (tracer) tracer->record(name, lane, start, tracer->now());
  }
};

// One hop around the ring: `out` to the next rank, `in` from the previous one (posted in the
// same order on every rank, so the k-th send pairs with the k-th receive: comm/communicator.hpp).
// Nothing moves when `active` is false (the last step passes no keys on).
struct Hop {
  Span span;
  CommHandle sent, received;
  bool active;
  Hop(Communicator& group, const Tensor& out, const Tensor& in, bool active, Tracer* tracer)
      : span(tracer), active(active) {
    if (!active) return;
    const int n = group.size(), r = group.rank();
    received = group.recv_async(in, (r + n - 1) % n);
    sent = group.send_async(out, (r + 1) % n);
  }
  void finish(const std::string& name) {
    if (!active) return;
    sent.wait();
    received.wait();
    span.end(name, kCommunicationLane);
  }
};

}  // namespace

void ContextParallel::ring_forward(Backend& be, const AttentionShape& s, const Tensor& qkv,
                                   const Tensor& out, const Tensor& lse,
                                   const RingBuffers& buffers, Tracer* tracer) const {
  KINTSUGI_ASSERT(ring());
  const Ring r = ring_of(*this, s, qkv);
  pack(be, s, qkv, buffers.kv[0], false);
  // Mixed precision: the running output in f32 (the state buffer), rounded once at the end.
  const Tensor o = state_view(buffers, out);
  const int n = r.chunks();
  std::vector<char> started(static_cast<std::size_t>(n), 0);
  for (int step = 0; step < size_; ++step) {
    const Tensor& current = buffers.kv[step % 2];
    Hop hop(*group_, current, buffers.kv[(step + 1) % 2], step + 1 < size_, tracer);
    const Span compute(tracer);
    // Whose keys and values these are.
    const ContextParallel::RowMap theirs = r.of(s, (rank_ - step + size_) % size_);
    for (int a = 0; a < n; ++a)
      for (int i = 0; i < n; ++i) {
        // At step 0 the diagonal chunk first: it starts each query chunk's running state.
        const int b = step == 0 ? (a + i) % n : i;
        const AttentionBlock blk = r.block(s, theirs, a, b);
        if (blk.q_count == 0) continue;
        be.attention_block_forward(s, blk, qkv, current, o, lse, started[a]);
        started[a] = true;
      }
    compute.end(fmt::format("cp ring attention forward step {}", step), kComputeLane);
    hop.finish(fmt::format("cp ring kv forward step {}", step));
  }
  if (o.data != out.data) be.convert(o, out);
}

void ContextParallel::ring_backward(Backend& be, const AttentionShape& s, const Tensor& qkv,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const Tensor& dqkv, const RingBuffers& buffers,
                                    Tracer* tracer) const {
  KINTSUGI_ASSERT(ring());
  const Ring r = ring_of(*this, s, qkv);
  pack(be, s, qkv, buffers.kv[0], false);
  be.zero(buffers.dkv[0]);
  // Mixed precision: dQ summed over the steps in f32 (the state buffer), rounded once.
  const Tensor dq = state_view(buffers, dqkv);
  be.zero(dq);  // the block kernels add into its queries
  for (int step = 0; step < size_; ++step) {
    const Tensor &current = buffers.kv[step % 2], &d_current = buffers.dkv[step % 2];
    Hop hop(*group_, current, buffers.kv[(step + 1) % 2], step + 1 < size_, tracer);
    const Span compute(tracer);
    const ContextParallel::RowMap theirs = r.of(s, (rank_ - step + size_) % size_);
    for (int a = 0; a < r.chunks(); ++a)
      for (int b = 0; b < r.chunks(); ++b) {
        const AttentionBlock blk = r.block(s, theirs, a, b);
        if (blk.q_count > 0)
          be.attention_block_backward(s, blk, qkv, current, out, lse, dout, dq, d_current);
      }
    compute.end(fmt::format("cp ring attention backward step {}", step), kComputeLane);
    // The accumulator goes on once this rank has added its queries' share; the one arriving
    // has every share of the ranks before this one (after the last step: this rank's own).
    Hop d_hop(*group_, d_current, buffers.dkv[(step + 1) % 2], true, tracer);
    hop.finish(fmt::format("cp ring kv backward step {}", step));
    d_hop.finish(fmt::format("cp ring dkv backward step {}", step));
  }
  pack(be, s, dq, buffers.dkv[size_ % 2], true);
  if (dq.data != dqkv.data) be.convert(dq, dqkv);
}

}  // namespace kintsugi
