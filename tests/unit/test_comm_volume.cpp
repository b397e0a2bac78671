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

TEST(CommVolume, SequenceParallelMovesWhatTensorParallelMoves) {
  ModelConfig m = model_preset("gpt-tiny");
  const StepShape s{.micro_batch = 2, .seq = 128, .micro_batches = 3, .grad_elements = 1000};
  const auto tp = step_comm_bytes(m, {.tp = 2}, s);
  const auto sp = step_comm_bytes(m, {.tp = 2, .sequence_parallel = true}, s);
  const double activation_bytes = 2.0 * 128 * m.d_model * 4;
  // 2 all-reduces per block in forward and 2 in backward, plus embedding and head.
  const double per_micro_batch = 2 * (1 + 2 * m.n_layer) * activation_bytes;  // 2(n-1)/n = 1
  const double loss_stats = 3 * 2 * 128 * 4;
  EXPECT_DOUBLE_EQ(tp.at("tp.all_reduce"), 3 * (per_micro_batch + loss_stats));
  EXPECT_DOUBLE_EQ(sp.at("tp.all_gather") + sp.at("tp.reduce_scatter"), 3 * per_micro_batch);
  EXPECT_FALSE(tp.count("dp.all_reduce"));
}

TEST(CommVolume, DataParallelReducesTheGradientOnce) {
  const auto v = step_comm_bytes(model_preset("gpt-tiny"), {.dp = 4},
                                 {.micro_batches = 5, .grad_elements = 1 << 20});
  EXPECT_DOUBLE_EQ(v.at("dp.all_reduce"), 1.5 * 4 * (1 << 20));
}

}  // namespace
}  // namespace kintsugi
