// The communication formulas of the cost model (the multi-rank tests hold the runtime's byte
// counters to them).
#include <gtest/gtest.h>

#include "kintsugi/plan/comm_volume.hpp"

namespace kintsugi {
namespace {

TEST(CommVolume, RingAlgorithms) {
  EXPECT_DOUBLE_EQ(ring_all_reduce_bytes(1000, 4), 1500);  // 2(n-1)/n
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_bytes(1000, 4), 750);
  EXPECT_DOUBLE_EQ(ring_all_gather_bytes(1000, 4), 750);
  EXPECT_DOUBLE_EQ(ring_all_reduce_bytes(1000, 1), 0);
}

TEST(CommVolume, SequenceParallelMovesWhatTensorParallelMovesAndTheRegathers) {
  ModelConfig m = model_preset("gpt-tiny");
  const StepShape s{.micro_batch = 2, .seq = 128, .micro_batches = 3, .grad_elements = 1000};
  const auto tp = step_comm_bytes(m, {.tp = 2}, s);
  const auto sp = step_comm_bytes(m, {.tp = 2, .sequence_parallel = true}, s);
  const double activation_bytes = 2.0 * 128 * m.d_model * 4;
  // 2 all-reduces per block in forward and 2 in backward, plus embedding and head.
  const double per_micro_batch = 2 * (1 + 2 * m.n_layer) * activation_bytes;  // 2(n-1)/n = 1
  const double loss_stats = 3 * 2 * 128 * 4;
  EXPECT_DOUBLE_EQ(tp.at("tp.all_reduce"), 3 * (per_micro_batch + loss_stats));
  // Sequence parallelism: the same, plus each block's two norm outputs gathered again in
  // backward (all-gather: (n-1)/n = 1/2 of the tensor).
  const double regathers = 2 * m.n_layer * activation_bytes / 2;
  EXPECT_DOUBLE_EQ(sp.at("tp.all_gather") + sp.at("tp.reduce_scatter"),
                   3 * (per_micro_batch + regathers));
  EXPECT_FALSE(tp.count("dp.all_reduce"));
}

// Expert parallelism (docs/moe.md, "The bytes"): the experts' gradients over the dp / ep ranks
// (group edp), the rest over dp; per MoE layer forward a counts exchange ((ep - 1) E / ep i32)
// and the rows, S sent and R received, twice each (forward, backward), once more per
// recomputed forward.
TEST(CommVolume, ExpertParallelismExchangesRowsAndReducesExpertsOverTheirReplicas) {
  ModelConfig m = model_preset("llama-tiny");
  m.moe.experts = 8;
  m.moe.top_k = 2;
  const double d = static_cast<double>(m.d_model);
  const ParallelLayout l{.dp = 8, .ep = 4};
  EXPECT_DOUBLE_EQ(expert_all_to_all_bytes(m, l, 10, 100, 60, 4, false),
                   10 * 3 * 2 * 4 + 2 * 160 * d * 4);
  EXPECT_DOUBLE_EQ(expert_all_to_all_bytes(m, l, 10, 100, 60, 4, true),
                   2 * 10 * 3 * 2 * 4 + 3 * 160 * d * 4);
  EXPECT_DOUBLE_EQ(expert_all_to_all_bytes(m, {.dp = 8}, 10, 100, 60, 4, false), 0);
  StepShape s{.micro_batch = 2, .seq = 16, .micro_batches = 3, .grad_elements = 1000};
  s.expert_grad_elements = s.expert_gathered_elements = 600;
  auto v = step_comm_bytes(m, l, s);
  EXPECT_DOUBLE_EQ(v.at("dp.all_reduce"), 2.0 * 7 / 8 * 4000);
  EXPECT_DOUBLE_EQ(v.at("edp.all_reduce"), 2400);  // 2 (n-1)/n, n = 2
  // Balanced routing: (ep - 1)/ep of each micro-batch's 32 x 2 rows each way, per layer.
  const double forwards = 3.0 * static_cast<double>(m.n_layer), rows = forwards * 64 * 0.75;
  EXPECT_DOUBLE_EQ(v.at("ep.all_to_all"), forwards * 3 * 2 * 4 + 2 * 2 * rows * d * 4);
  // The routing's own rows replace the balanced ones.
  s.expert_rows_sent = 100;
  s.expert_rows_received = 60;
  v = step_comm_bytes(m, l, s);
  EXPECT_DOUBLE_EQ(v.at("ep.all_to_all"), forwards * 3 * 2 * 4 + 2 * 160 * d * 4);
  // ZeRO-3 over the 2 expert-data-parallel ranks: the experts' reduce-scatter every
  // micro-batch and their gathers before forward and backward.
  v = step_comm_bytes(m, {.dp = 8, .zero = ZeroStage::parameters, .ep = 4}, s);
  EXPECT_DOUBLE_EQ(v.at("edp.reduce_scatter"), 3 * 1200);
  EXPECT_DOUBLE_EQ(v.at("edp.all_gather"), 3 * 0.5 * 2 * 600 * 4);
  // ep = dp: every expert on one rank, nothing to reduce over edp.
  v = step_comm_bytes(m, {.dp = 4, .ep = 4}, s);
  EXPECT_EQ(v.count("edp.all_reduce"), 0u);
}

TEST(CommVolume, DataParallelReducesTheGradientOnce) {
  const auto v = step_comm_bytes(model_preset("gpt-tiny"), {.dp = 4},
                                 {.micro_batches = 5, .grad_elements = 1 << 20});
  EXPECT_DOUBLE_EQ(v.at("dp.all_reduce"), 1.5 * 4 * (1 << 20));
}

// Context parallelism: gradients summed over dp x cp (group dp_cp), and per block and
// micro-batch five all-to-alls of (cp - 1)/cp of a buffer (forward: qkv out, attention back;
// backward: attention out again, its gradient, the qkv gradient back), each buffer this rank's
// seq / cp rows of its tensor-parallel rank's heads.
TEST(CommVolume, ContextParallelExchangesAroundAttention) {
  ModelConfig m = model_preset("gpt-tiny");
  m.n_layer = 3;
  m.seq_len = 64;
  const StepShape s{.micro_batch = 2, .seq = 64, .micro_batches = 5, .grad_elements = 1 << 20};
  const auto v = step_comm_bytes(m, {.tp = 2, .dp = 2, .cp = 4}, s);
  EXPECT_DOUBLE_EQ(v.at("dp_cp.all_reduce"), 2.0 * 7 / 8 * 4 * (1 << 20));
  EXPECT_EQ(v.count("dp.all_reduce"), 0u);
  // gpt-tiny: MHA, qkv 3 d wide and the attention output d.
  const double rows = 2 * 64 / 4, d = static_cast<double>(m.d_model);
  const double qkv = rows * 3 * d / 2 * 4, attn = rows * d / 2 * 4;
  EXPECT_DOUBLE_EQ(v.at("cp.all_to_all"), 5 * 3 * 0.75 * (2 * qkv + 3 * attn));
  // The tensor-parallel exits carry this rank's rows only.
  const auto serial_tp = step_comm_bytes(m, {.tp = 2, .dp = 2}, s);
  EXPECT_DOUBLE_EQ(v.at("tp.all_reduce"), serial_tp.at("tp.all_reduce") / 4);
  // ZeRO shards over all eight.
  const auto zero = step_comm_bytes(m, {.tp = 2, .dp = 2, .zero = ZeroStage::optimizer, .cp = 4}, s);
  EXPECT_DOUBLE_EQ(zero.at("dp_cp.reduce_scatter"), 7.0 / 8 * 4 * (1 << 20));
}

// The ring exchange instead: per block and micro-batch this rank's keys and values (its seq / cp
// rows of its tensor-parallel rank's kv heads, 2 kv_heads head_dim / tp wide) go to the next rank
// cp - 1 times forward, cp - 1 times backward, and their gradient's accumulator cp times (in the
// statistics type); either recomputation passes them around once more. Llama's grouped-query attention: 2 kv heads of 4.
TEST(CommVolume, RingPassesKeysAndValuesAround) {
  ModelConfig m = model_preset("llama-tiny");
  m.n_layer = 3;
  m.seq_len = 64;
  StepShape s{.micro_batch = 2, .seq = 64, .micro_batches = 5, .grad_elements = 1 << 20};
  const ParallelLayout ring{.tp = 2, .dp = 2, .cp = 4, .cp_comm = CpComm::ring};
  const double rows = 2 * 64 / 4;
  const double kv = rows * 2 * static_cast<double>(m.kv_heads() * m.head_dim()) / 2 * 4;
  auto v = step_comm_bytes(m, ring, s);
  EXPECT_EQ(v.count("cp.all_to_all"), 0u);
  EXPECT_DOUBLE_EQ(v.at("cp.send"), 5 * 3 * kv * (3 + 3 + 4));
  s.recompute_selective = true;
  EXPECT_DOUBLE_EQ(step_comm_bytes(m, ring, s).at("cp.send"), 5 * 3 * kv * (3 + 3 + 3 + 4));
  s.recompute_selective = false;
  s.recompute_full = true;
  EXPECT_DOUBLE_EQ(step_comm_bytes(m, ring, s).at("cp.send"), 5 * 3 * kv * (3 + 3 + 3 + 4));
  // bf16/fp16: keys and values in 2 bytes, the accumulators still in f32 (4 bytes: twice the
  // elements' share of keys and values), so cp 4 sends K (3 + 3) 2 + 4 K 4 bytes, K a (4 cp - 2).
  s.recompute_full = false;
  s.activation_element_bytes = 2;
  EXPECT_DOUBLE_EQ(step_comm_bytes(m, ring, s).at("cp.send"), 5 * 3 * kv / 2 * (4 * 4 - 2));
  s.statistic_bytes = 8;  // f64 checks: the accumulators in f64
  EXPECT_DOUBLE_EQ(step_comm_bytes(m, ring, s).at("cp.send"), 5 * 3 * kv / 4 * ((3 + 3) * 2 + 4 * 8));
}

// The ZeRO paper's accounting, with one micro-batch per step: ZeRO-1 and ZeRO-2 move what plain
// data parallelism moves (a reduce-scatter plus an all-gather is one all-reduce), ZeRO-3 1.5x
// for parameters gathered twice (blocks: before forward and before backward). Embeddings and
// the head, gathered once for the whole micro-batch, cost 1x.
TEST(CommVolume, ZeroStagesMoveOneOrOneAndAHalfAllReduces) {
  const ModelConfig m = model_preset("gpt-tiny");
  const std::int64_t psi = 1 << 20;
  auto total = [&](int stage, std::int64_t twice, std::int64_t micro_batches) {
    StepShape s{.micro_batches = micro_batches, .grad_elements = psi};
    s.gathered_twice_elements = twice;
    s.gathered_once_elements = psi - twice;
    double bytes = 0;
    const ParallelLayout layout{.dp = 4, .zero = zero_stage(stage, "zero")};  // 4 shards
    for (const auto& [key, b] : step_comm_bytes(m, layout, s)) bytes += b;
    return bytes;
  };
  const double plain = total(0, psi, 1);
  EXPECT_DOUBLE_EQ(total(1, psi, 1), plain);
  EXPECT_DOUBLE_EQ(total(2, psi, 1), plain);
  EXPECT_DOUBLE_EQ(total(3, psi, 1), 1.5 * plain);
  EXPECT_DOUBLE_EQ(total(3, psi / 4, 1), (1.0 + 0.25 / 2) * plain);
  // With m micro-batches ZeRO-2 reduce-scatters every one (the full gradient never exists);
  // ZeRO-1 still reduces once.
  EXPECT_DOUBLE_EQ(total(1, psi, 4), plain);
  EXPECT_DOUBLE_EQ(total(2, psi, 4), (4 + 1) / 2.0 * plain);
}

}  // namespace
}  // namespace kintsugi
