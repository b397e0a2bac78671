#pragma once
// Runs a pipeline schedule (pipeline_schedule.hpp) over this rank's model chunks: posts the
// receives, runs forward and backward of each (chunk, micro-batch) in a slot of the chunk once
// its input has arrived, and sends outputs and input gradients on, all transfers non-blocking
// on the pipeline group's communication thread. Transfers carry no tag: the communicator pairs
// them in posting order, which the schedules keep matched between every two ranks
// (test_pipeline_schedule checks it). Any schedule runs on it, including a forward-only one for
// evaluation.
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/trace.hpp"
#include "kintsugi/model/model_chunk.hpp"
#include "kintsugi/parallel/pipeline_schedule.hpp"

namespace kintsugi {

class PipelineExecutor {
 public:
  // chunks[c] is local chunk c (global chunk c * p + rank); pp is null with one stage.
  PipelineExecutor(std::vector<ModelChunk*> chunks, PipelineShape shape, int rank,
                   Communicator* pp, Tracer& tracer);

  struct Hooks {
    // Fills micro-batch mb's tokens and targets ([micro_batch * seq] each, host memory); the
    // executor moves them to the chunk's device tensors.
    std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)> sample;
    std::function<void()> reduce_grads, optimizer_step;
  };
  // Executes `program`. The loss chunk (last stage) adds the token losses to its loss_sum().
  // grad_scale multiplies the loss whose gradient backward computes.
  void run(const std::vector<PipeInstruction>& program, bool training, double grad_scale,
           const Hooks& hooks);

  // Seconds spent computing during the last run (forward and backward), for the bubble.
  double compute_seconds() const { return compute_seconds_; }
  // The most micro-batches whose activations this rank held at once during the last run.
  int peak_in_flight() const { return peak_in_flight_; }

 private:
  struct Slot {
    std::vector<std::int32_t> tokens, targets;
    std::vector<CommHandle> sends;  // outstanding sends from this slot's buffers
  };
  int slot_of(int mb) const;
  void wait_sends(Slot& slot);
  void wait_receive(int direction, int chunk, int mb);

  std::vector<ModelChunk*> chunks_;
  PipelineShape shape_;
  int rank_;
  Communicator* pp_;
  Tracer& tracer_;
  std::vector<std::vector<Slot>> slots_;  // [chunk][slot]
  std::map<std::tuple<int, int, int>, CommHandle> receives_;  // (direction, chunk, mb)
  double compute_seconds_ = 0;
  int peak_in_flight_ = 0;
};

}  // namespace kintsugi
