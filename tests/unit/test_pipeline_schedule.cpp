// Pipeline schedules without a model: for every p <= 8, v <= 4 and valid micro-batch count,
// every transfer is matched (and paired in posting order), nothing deadlocks, in-flight
// micro-batches are bounded as each schedule promises, and the idle time equals the theoretical
// bubble.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "kintsugi/core/error.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"

namespace kintsugi {
namespace {

// Transfers carry no tag (an NCCL communicator has none): the k-th message one rank sends
// another is the k-th receive the other posts from it. So every pair's sends, in the sender's
// program order, must be the receiver's receives from it, in its program order.
void expect_paired_in_order(const std::vector<std::vector<PipeInstruction>>& programs,
                            const PipelineShape& s, const std::string& what) {
  const int p = s.stages, chunks = s.stages * s.virtual_stages;
  using Message = std::tuple<int, int, int>;  // direction, receiving global chunk, micro-batch
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;  // (from, to) -> messages
  for (int r = 0; r < p; ++r)
    for (const PipeInstruction& in : programs[r]) {
      const int g = global_chunk(s, r, in.chunk);
      const int mb = in.micro_batch, next = (g + 1) % p, previous = (g - 1 + chunks) % p;
      if (in.op == PipeOp::send_forward) sent[{r, next}].push_back({0, g + 1, mb});
      if (in.op == PipeOp::send_backward) sent[{r, previous}].push_back({1, g - 1, mb});
      if (in.op == PipeOp::recv_forward) received[{previous, r}].push_back({0, g, mb});
      if (in.op == PipeOp::recv_backward) received[{next, r}].push_back({1, g, mb});
    }
  EXPECT_EQ(sent, received) << what << ": sends and receives between a pair differ in order";
}

void check(PipelineSchedule schedule, const PipelineShape& s) {
  const auto sim = simulate(schedule, s, 1.0, 2.0);
  const std::string what = fmt::format("{} p={} v={} m={}", name_of(schedule), s.stages,
                                       s.virtual_stages, s.micro_batches);
  ASSERT_FALSE(sim.deadlock) << what << ": " << sim.problem;
  ASSERT_TRUE(sim.problem.empty()) << what << ": " << sim.problem;
  // Busy time is m (t_f + t_b) on every rank; the rest of the makespan is the bubble.
  const double theory_idle = (s.stages - 1) * 3.0 / s.virtual_stages;
  for (int r = 0; r < s.stages; ++r) {
    EXPECT_NEAR(sim.idle[r], theory_idle, 1e-9) << what << " rank " << r;
    const int in_flight = max_in_flight(schedule, s, r);
    if (schedule == PipelineSchedule::gpipe) EXPECT_EQ(in_flight, s.micro_batches) << what;
    if (schedule == PipelineSchedule::one_f_one_b) EXPECT_LE(in_flight, s.stages) << what;
  }
  EXPECT_NEAR(theory_idle / sim.makespan, bubble_fraction(s), 1e-9) << what;
  std::vector<std::vector<PipeInstruction>> programs, forward_only;
  for (int r = 0; r < s.stages; ++r) {
    programs.push_back(make_schedule(schedule, s, r));
    forward_only.push_back(make_forward_schedule(s, r));
  }
  expect_paired_in_order(programs, s, what);
  expect_paired_in_order(forward_only, s, what + " (forward only)");
}

TEST(PipelineSchedule, GPipeAndOneFOneBForAllShapes) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m) {
      check(PipelineSchedule::gpipe, {p, 1, m});
      check(PipelineSchedule::one_f_one_b, {p, 1, m});
    }
}

TEST(PipelineSchedule, InterleavedForAllShapes) {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= (p == 1 ? 1 : 4); ++v)
      for (int m = p; m <= 3 * p; m += p) check(PipelineSchedule::interleaved, {p, v, m});
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMicroBatches) {
  // Stage r of p holds p - r micro-batches at its peak (when m >= p).
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(max_in_flight(PipelineSchedule::one_f_one_b, {4, 1, 8}, r), 4 - r);
}

TEST(PipelineSchedule, InstructionsOfAOneFOneBStage) {
  // Middle stage of 3, 3 micro-batches: one warm-up forward, then alternate, then drain.
  using O = PipeOp;
  const std::vector<PipeInstruction> expected = {
      {O::recv_forward, 0, 0}, {O::forward, 0, 0},       {O::send_forward, 0, 0},
      {O::recv_forward, 0, 1}, {O::forward, 0, 1},       {O::send_forward, 0, 1},
      {O::recv_backward, 0, 0}, {O::backward, 0, 0},     {O::send_backward, 0, 0},
      {O::recv_forward, 0, 2}, {O::forward, 0, 2},       {O::send_forward, 0, 2},
      {O::recv_backward, 0, 1}, {O::backward, 0, 1},     {O::send_backward, 0, 1},
      {O::recv_backward, 0, 2}, {O::backward, 0, 2},     {O::send_backward, 0, 2},
      {O::reduce_grads, 0, 0},  {O::optimizer_step, 0, 0}};
  EXPECT_EQ(make_schedule(PipelineSchedule::one_f_one_b, {3, 1, 3}, 1), expected);
}

TEST(PipelineSchedule, InterleavingNeedsEnoughMicroBatches) {
  EXPECT_THROW(make_schedule(PipelineSchedule::interleaved, {4, 2, 2}, 0), Error);
  EXPECT_THROW(make_schedule(PipelineSchedule::interleaved, {4, 2, 6}, 0), Error);
  EXPECT_THROW(make_schedule(PipelineSchedule::one_f_one_b, {4, 2, 8}, 0), Error);
  EXPECT_NO_THROW(make_schedule(PipelineSchedule::interleaved, {4, 2, 8}, 0));
}

}  // namespace
}  // namespace kintsugi
