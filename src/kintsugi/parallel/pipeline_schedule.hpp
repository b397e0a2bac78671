#pragma once
// Pipeline schedules as data (docs/design.md principle 5, DeepSpeed's instruction lists): a pure
// function from (stages, virtual stages, micro-batches, rank) to the ordered instructions that
// rank executes in one optimizer step. One executor runs any of them; tests check them without
// a model (matched transfers, no deadlock, micro-batches in flight, bubble).
//
// With v virtual stages (interleaving) the model is cut into p x v chunks; rank r holds local
// chunks c = 0..v-1, which are global chunks c x p + r. Activations flow from global chunk g to
// g + 1; gradients back.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/core/enum_names.hpp"
#include "kintsugi/core/parallel_layout.hpp"  // PipelineSchedule

namespace kintsugi {

enum class PipeOp {
  recv_forward,   // receive the input activation of (chunk, micro-batch)
  forward,
  send_forward,   // send its output activation to the next chunk
  recv_backward,  // receive the gradient of its output
  backward,
  send_backward,  // send the gradient of its input to the previous chunk
  reduce_grads,   // data-parallel and tied-embedding gradient reduction
  optimizer_step
};
std::string_view name_of(PipeOp op);

struct PipeInstruction {
  PipeOp op;
  int chunk = 0;  // local chunk on this rank
  int micro_batch = 0;
  bool operator==(const PipeInstruction&) const = default;
};

struct PipelineShape {
  int stages = 1;          // p
  int virtual_stages = 1;  // v (chunks per rank)
  int micro_batches = 1;   // m
};

// Throws kintsugi::Error naming the value to change (interleaving needs m >= p and m % p == 0).
void validate(PipelineSchedule schedule, const PipelineShape& shape);

std::vector<PipeInstruction> make_schedule(PipelineSchedule schedule, const PipelineShape& shape,
                                           int rank);

// Forward passes only (evaluation): every micro-batch through every chunk, in order.
std::vector<PipeInstruction> make_forward_schedule(const PipelineShape& shape, int rank);

// Global chunk of a rank's local chunk, and where a global chunk lives.
inline int global_chunk(const PipelineShape& s, int rank, int chunk) {
  return chunk * s.stages + rank;
}

// The most micro-batches a rank holds activations for at once under a schedule (per chunk, the
// largest over its chunks): m for GPipe, at most p for 1F1B.
int max_in_flight(PipelineSchedule schedule, const PipelineShape& shape, int rank);

// Activation slots a rank's program needs when each (chunk, micro-batch) holds one from the
// first instruction naming it to the last, as the executor hands them out from one pool shared
// by the rank's chunks: the most (chunk, micro-batch) pairs live at once.
int slots_needed(const std::vector<PipeInstruction>& program);
// The slots the rank needs for its training step and its evaluation pass, at least one.
int activation_slots(PipelineSchedule schedule, const PipelineShape& shape, int rank);

// Executes all ranks' schedules in simulated time, with forward and backward of a whole stage
// taking forward_time and backward_time (a chunk: 1/v of that) and transfers taking none.
struct PipelineSimulation {
  bool deadlock = false;
  std::string problem;             // unmatched transfer or deadlock, when any
  double makespan = 0;
  std::vector<double> idle;        // per rank: makespan minus busy time
  std::vector<int> max_in_flight;  // per rank: most micro-batch-chunks forwarded, not yet backward
};
PipelineSimulation simulate(PipelineSchedule schedule, const PipelineShape& shape,
                            double forward_time = 1.0, double backward_time = 2.0);

// Theory: idle time per rank = (p - 1) (t_f + t_b) / v; as a fraction of the step,
// (p - 1) / (v m + p - 1).
double bubble_fraction(const PipelineShape& shape);

}  // namespace kintsugi
