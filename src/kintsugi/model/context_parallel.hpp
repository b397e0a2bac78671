#pragma once
// Context parallelism (docs/parallelism.md, "Context parallelism"): every sequence of a
// micro-batch is split over the group, each rank holding 1/cp of its rows through every layer
// but attention (which rows: RowMap). Attention needs every earlier row, so around it the
// ranks exchange: with all_to_all (DeepSpeed's Ulysses) each rank holds a contiguous 1/cp and
// trades its rows of all its heads for all rows of 1/cp of its heads, attends over whole
// sequences, and trades back; with the ring each rank holds chunks r and 2 cp - 1 - r of the
// 2 cp chunks of a sequence, or of each window of it with packed documents (the causal work
// balanced) and passes key/value chunks around the
// ring, attending its queries to one block at a time (ring_attention.cpp). Every other layer
// works on rows and needs nothing from other ranks; the weights are the same on every rank and
// their gradients are summed over dp x cp (train/place.hpp).
//
// With one rank every mapping is the identity and no one calls the exchanges.
#include <cstdint>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/parallel_layout.hpp"
#include "kintsugi/core/trace.hpp"

namespace kintsugi {

class ContextParallel {
 public:
  ContextParallel() = default;  // one rank: whole sequences
  // windows: the ring's head-tail windows per sequence (ring_windows), 1 for all_to_all.
  ContextParallel(Communicator& group, CpComm comm, int windows = 1)
      : group_(&group), size_(group.size()), rank_(group.rank()), ring_(comm == CpComm::ring),
        windows_(ring_ ? windows : 1) {}

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool active() const { return size_ > 1; }
  // The ring exchange (parallel.cp_comm = "ring"), else all_to_all.
  bool ring() const { return active() && ring_; }
  Communicator* group() const { return group_; }

  // The rows of each sequence a rank holds, in the order of its buffers: runs of `chunk`
  // consecutive positions, run k starting at position first[k].
  struct RowMap {
    std::int64_t chunk = 0;
    std::vector<std::int64_t> first;
    std::int64_t rows() const { return chunk * static_cast<std::int64_t>(first.size()); }
    std::int64_t position(std::int64_t row) const { return first[row / chunk] + row % chunk; }
  };
  // all_to_all: rank r holds [r seq / size, (r + 1) seq / size); the ring: the sequence cut
  // into `windows` windows of 2 size chunks of seq / (2 size windows) rows, and in each window
  // chunks r and 2 size - 1 - r (seq divisible by 2 size, layout_rules.cpp checks; by
  // 2 size windows, ring_windows sees to it).
  static RowMap contiguous_rows(int size, int rank, std::int64_t seq);
  static RowMap ring_rows(int size, int rank, std::int64_t seq, int windows = 1);
  RowMap rows(std::int64_t seq) const {
    return ring() ? ring_rows(size_, rank_, seq, windows_) : contiguous_rows(size_, rank_, seq);
  }
  // The ring's windows (docs/parallelism.md, "Ring exchange"): 1 without packed documents (the
  // head-tail pair balances causal attention exactly); with them, where documents break the
  // causal ramp, as many as keep chunks of kRingChunkMin rows or more, up to kRingWindowsMax
  // (a power of two dividing seq / (2 size)), so that each window is short against the
  // documents and its head-tail pairs stay balanced.
  static constexpr int kRingWindowsMax = 32;
  static constexpr std::int64_t kRingChunkMin = 64;
  static int ring_windows(std::int64_t seq, int size, bool documents);
  int windows() const { return windows_; }
  std::int64_t local_seq(std::int64_t seq) const { return seq / size_; }

  // Ulysses. `local`: [batch * local_seq, width], this rank's rows of each sequence, all of
  // its columns (heads); `heads`: [batch * seq, width / size] (any 2-D shape of that many
  // elements), every row, the rank's 1/size of the columns, column block r going to rank r.
  // `send` and `recv` are scratch of local's size. Columns are split in size() equal blocks,
  // so a block is whole heads when heads (for packed qkv: kv heads with their groups) divide
  // by size (parallel/layout_rules.cpp checks).
  void to_heads(Backend& be, const Tensor& local, const Tensor& heads, std::int64_t batch,
                const Tensor& send, const Tensor& recv) const;
  // The inverse: `heads` back to this rank's rows of every column.
  void to_rows(Backend& be, const Tensor& heads, const Tensor& local, std::int64_t batch,
               const Tensor& send, const Tensor& recv) const;

  // The ring (ring_attention.cpp). `s` describes whole sequences (AttentionShape with seq the
  // sequence's length, doc_start over it, the rank's tensor-parallel heads); qkv [batch *
  // local_seq, width] holds this rank's rows (RoPE and qk_norm applied at their positions),
  // out [batch * local_seq, heads * hd] and lse [batch, heads, local_seq] likewise. The
  // buffers are four of [batch * local_seq, kv_heads * 2 * hd]: the key/value chunk being
  // attended and the one arriving (kv, the run's type), and in backward their gradients'
  // accumulators (dkv, the statistics type: f32 under bf16/fp16). With a 16-bit run `state`
  // holds the running output forward and dQ backward in f32 (at least batch * local_seq
  // x qkv width elements; empty otherwise: out and dqkv themselves).
  struct RingBuffers {
    Tensor kv[2], dkv[2];
    Tensor state;
  };
  // out and lse: this rank's rows attended to every rank's keys and values.
  void ring_forward(Backend& be, const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                    const Tensor& lse, const RingBuffers& buffers, Tracer* tracer) const;
  // dqkv (overwritten): the gradient of this rank's rows' queries, and of its keys and values
  // summed over every rank's queries (their accumulator travels the ring back home).
  void ring_backward(Backend& be, const AttentionShape& s, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const Tensor& dout, const Tensor& dqkv,
                     const RingBuffers& buffers, Tracer* tracer) const;

 private:
  Communicator* group_ = nullptr;
  int size_ = 1, rank_ = 0;
  bool ring_ = false;
  int windows_ = 1;
};

}  // namespace kintsugi
