#pragma once
// Runs a pipeline schedule (pipeline_schedule.hpp) over this rank's model chunks: posts the
// receives, runs forward and backward of each (chunk, micro-batch) in a slot of the chunk once
// its input has arrived, and sends outputs and input gradients on, all transfers non-blocking
// on the pipeline group's communication thread. Transfers carry no tag: the communicator pairs
// them in posting order, which the schedules keep matched between every two ranks
// (test_pipeline_schedule checks it). Any schedule runs on it, including a forward-only one for
// evaluation.
//
// The chunks' activation slots are one pool (model/activation_pool.hpp): a (chunk, micro-batch)
// takes a free slot at the first instruction that names it and gives it back after the last,
// so the rank needs slots_needed(program) of them (pipeline_schedule.hpp).
#include <cstdint>
#include <functional>
#include <deque>
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
    // Asked before each micro-batch's forward: whether to abandon the program there. It is a
    // collective decision of the ranks that run this program in lockstep: the whole job with
    // one stage; this stage's tensor- and data-parallel ranks with a pipeline, whose stages are
    // at different micro-batches at any moment.
    std::function<bool(int mb)> stop = {};
    // With a pipeline: asked on every rank of the job once its program has run (before the
    // gradients are reduced): whether any stage abandoned it. A collective of the whole job.
    std::function<bool(bool abandoned_here)> any_abandoned = {};
  };
  // Executes `program`. The loss chunk (last stage) adds the token losses to its loss_sum().
  // grad_scale multiplies the loss whose gradient backward computes. Returns false when
  // hooks.stop abandoned it: the weights and optimizer state are untouched, the gradients and
  // losses partial. A pipeline stage that abandons the program drains it: it still posts and
  // waits for every transfer of the remaining instructions, computing nothing, so that the
  // other stages reach their end too and the transfers stay paired for the next program.
  bool run(const std::vector<PipeInstruction>& program, bool training, double grad_scale,
           const Hooks& hooks);

  // Seconds spent computing during the last run (forward and backward), for the bubble.
  double compute_seconds() const { return compute_seconds_; }
  // The most micro-batches whose activations this rank held at once during the last run.
  int peak_in_flight() const { return peak_in_flight_; }

 private:
  struct Slot {
    std::vector<std::int32_t> tokens, targets;
    // Outstanding sends from the slot's output (pool memory, shared by the chunks) and from
    // its chunk's input-gradient buffer.
    std::vector<CommHandle> output_sends, grad_sends;
  };
  // The pool slot of (chunk, mb), taken at its first instruction.
  static std::map<std::pair<int, int>, std::size_t> last_instructions(
      const std::vector<PipeInstruction>& program);
  void forward(const PipeInstruction& in, int slot, bool training, double grad_scale,
               const Hooks& hooks, int& in_flight);
  void backward(const PipeInstruction& in, int slot, int& in_flight);
  int acquire_slot(int chunk, int mb);
  static void wait_sends(std::vector<CommHandle>& sends);
  void wait_receive(int direction, int chunk, int mb);
  // Runs `work` as one span of the traced step, on `lane` and on the device's timeline.
  void traced(const char* name, int lane, const std::function<void()>& work);

  std::vector<ModelChunk*> chunks_;
  PipelineShape shape_;
  int rank_;
  Communicator* pp_;
  Tracer& tracer_;
  std::vector<std::vector<Slot>> slots_;  // [chunk][slot]
  std::map<std::tuple<int, int, int>, CommHandle> receives_;  // (direction, chunk, mb)
  std::map<std::pair<int, int>, int> held_;                    // (chunk, mb) -> pool slot
  std::deque<int> free_;  // pool slots not held, in the order they were given back
  double compute_seconds_ = 0;
  int peak_in_flight_ = 0;
};

}  // namespace kintsugi
