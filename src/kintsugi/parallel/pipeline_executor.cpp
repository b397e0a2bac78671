#include "kintsugi/parallel/pipeline_executor.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

namespace {
constexpr int kForward = 0, kBackward = 1;
}

PipelineExecutor::PipelineExecutor(std::vector<ModelChunk*> chunks, PipelineShape shape,
                                   int rank, Communicator* pp, Tracer& tracer)
    : chunks_(std::move(chunks)), shape_(shape), rank_(rank), pp_(pp), tracer_(tracer) {
  KINTSUGI_ASSERT(static_cast<int>(chunks_.size()) == shape.virtual_stages);
  for (ModelChunk* c : chunks_) {
    KINTSUGI_ASSERT(c->slots() == chunks_.front()->slots());  // one pool
    const std::size_t tokens = static_cast<std::size_t>(c->micro_batch() * c->seq());
    slots_.emplace_back(c->slots());
    for (Slot& s : slots_.back()) {
      s.tokens.resize(tokens);
      s.targets.resize(tokens);
    }
  }
}

int PipelineExecutor::acquire_slot(int chunk, int mb) {
  if (auto it = held_.find({chunk, mb}); it != held_.end()) return it->second;
  KINTSUGI_ASSERT(!free_.empty());  // sized by slots_needed of the same program
  // The slot's activations are reused, so the outputs the last holders sent from them must be
  // gone (they are: a holder gives the slot back after its backward, which needed the next
  // stage's gradient, which needed that output). Take the slot given back longest ago. The
  // chunk's input-gradient buffer of the slot is waited for only before it is written
  // (receive of the gradient, backward): that send waits for the previous stage's receive.
  const int k = free_.front();
  free_.pop_front();
  for (auto& chunk_slots : slots_) wait_sends(chunk_slots[k].output_sends);
  held_[{chunk, mb}] = k;
  return k;
}

void PipelineExecutor::wait_sends(std::vector<CommHandle>& sends) {
  for (auto& h : sends) h.wait();
  sends.clear();
}

void PipelineExecutor::wait_receive(int direction, int chunk, int mb) {
  auto it = receives_.find({direction, chunk, mb});
  if (it == receives_.end()) return;  // nothing to receive (first or last chunk)
  const double start = tracer_.now();
  it->second.wait();
  receives_.erase(it);
  tracer_.record(fmt::format("wait {} c{} mb{}", direction == kForward ? "activation" : "gradient",
                             chunk, mb),
                 1, start, tracer_.now());
}

// (chunk, micro-batch) -> the index of its last instruction, when its slot goes back to the pool.
void PipelineExecutor::traced(const char* name, int lane, const std::function<void()>& work) {
  const double start = tracer_.now();
  const int device_start = tracer_.device_mark();
  work();
  tracer_.record_device(name, device_start, tracer_.device_mark());
  tracer_.record(name, lane, start, tracer_.now());
}

std::map<std::pair<int, int>, std::size_t> PipelineExecutor::last_instructions(
    const std::vector<PipeInstruction>& program) {
  std::map<std::pair<int, int>, std::size_t> last;
  for (std::size_t i = 0; i < program.size(); ++i)
    if (program[i].op != PipeOp::reduce_grads && program[i].op != PipeOp::optimizer_step)
      last[{program[i].chunk, program[i].micro_batch}] = i;
  return last;
}

void PipelineExecutor::forward(const PipeInstruction& in, int s, bool training, double grad_scale,
                               const Hooks& hooks, int& in_flight) {
  ModelChunk* chunk = chunks_[in.chunk];
  Slot& slot = slots_[in.chunk][s];
  wait_receive(kForward, in.chunk, in.micro_batch);
  hooks.sample(in.micro_batch, slot.tokens.data(), slot.targets.data());
  chunk->load(s, slot.tokens.data(), slot.targets.data());  // every stage: its rows, documents
  const double start = tracer_.now();
  const int device_start = tracer_.device_mark();
  chunk->forward(s, training, grad_scale);
  compute_seconds_ += tracer_.now() - start;
  std::string name =
      fmt::format("F c{} mb{}", global_chunk(shape_, rank_, in.chunk), in.micro_batch);
  tracer_.record_device(name, device_start, tracer_.device_mark());
  tracer_.record(std::move(name), kComputeLane, start, tracer_.now());
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight);
  if (!training) --in_flight;
  tracer_.counter("micro-batches in flight", in_flight);
}

void PipelineExecutor::backward(const PipeInstruction& in, int s, int& in_flight) {
  wait_receive(kBackward, in.chunk, in.micro_batch);
  wait_sends(slots_[in.chunk][s].grad_sends);  // the loss chunk receives no gradient
  const double start = tracer_.now();
  const int device_start = tracer_.device_mark();
  chunks_[in.chunk]->backward(s, in.micro_batch == shape_.micro_batches - 1);
  compute_seconds_ += tracer_.now() - start;
  std::string name =
      fmt::format("B c{} mb{}", global_chunk(shape_, rank_, in.chunk), in.micro_batch);
  tracer_.record_device(name, device_start, tracer_.device_mark());
  tracer_.record(std::move(name), kComputeLane, start, tracer_.now());
  --in_flight;
  tracer_.counter("micro-batches in flight", in_flight);
}

bool PipelineExecutor::run(const std::vector<PipeInstruction>& program, bool training,
                           double grad_scale, const Hooks& hooks) {
  const int p = shape_.stages, chunks_total = shape_.stages * shape_.virtual_stages;
  compute_seconds_ = 0;
  peak_in_flight_ = 0;
  int in_flight = 0;
  const auto last = last_instructions(program);
  held_.clear();
  free_.clear();
  for (int k = 0; k < chunks_.front()->slots(); ++k) free_.push_back(k);
  bool draining = false, abandoned = false;
  const bool has_reduce = std::any_of(program.begin(), program.end(), [](const auto& in) {
    return in.op == PipeOp::reduce_grads;
  });
  for (std::size_t index = 0; index < program.size(); ++index) {
    const PipeInstruction& in = program[index];
    ModelChunk* chunk = in.op == PipeOp::reduce_grads || in.op == PipeOp::optimizer_step
                            ? nullptr
                            : chunks_[in.chunk];
    const int s = chunk ? acquire_slot(in.chunk, in.micro_batch) : -1;
    Slot* slot = chunk ? &slots_[in.chunk][s] : nullptr;
    const int g = global_chunk(shape_, rank_, in.chunk);
    switch (in.op) {
      case PipeOp::recv_forward:  // into the slot's activations: free since acquire_slot
        receives_[{kForward, in.chunk, in.micro_batch}] =
            pp_->recv_async(chunk->input(s), (g - 1) % p);
        break;
      case PipeOp::forward:
        if (!draining && hooks.stop && hooks.stop(in.micro_batch)) {
          // One stage: nothing is in flight between micro-batches (the gradient reduction
          // starts in the last backward), so the program can end here.
          if (p == 1) return false;
          draining = true;
        }
        if (draining) wait_receive(kForward, in.chunk, in.micro_batch);
        else forward(in, s, training, grad_scale, hooks, in_flight);
        break;
      case PipeOp::send_forward:
        slot->output_sends.push_back(pp_->send_async(chunk->output(s), (g + 1) % p));
        break;
      case PipeOp::recv_backward:
        wait_sends(slot->grad_sends);  // the gradient buffer is reused
        receives_[{kBackward, in.chunk, in.micro_batch}] =
            pp_->recv_async(chunk->grad(s), (g + 1) % p);
        break;
      case PipeOp::backward:
        if (draining) {
          wait_receive(kBackward, in.chunk, in.micro_batch);
          wait_sends(slot->grad_sends);
        } else {
          backward(in, s, in_flight);
        }
        break;
      case PipeOp::send_backward:
        slot->grad_sends.push_back(pp_->send_async(chunk->grad(s), (g - 1 + chunks_total) % p));
        break;
      case PipeOp::reduce_grads: {
        // Every rank reduces, abandoned or not: a stage's data-parallel ranks may have started
        // reducing in their last backward, and the reductions must finish on both sides.
        if (p > 1 && hooks.any_abandoned) abandoned = hooks.any_abandoned(draining);
        traced("reduce gradients", kCommunicationLane, hooks.reduce_grads);
        break;
      }
      case PipeOp::optimizer_step:
        if (!abandoned) traced("optimizer", kComputeLane, hooks.optimizer_step);
        break;
    }
    if (chunk && last.at({in.chunk, in.micro_batch}) == index) {
      held_.erase({in.chunk, in.micro_batch});
      free_.push_back(s);
    }
  }
  for (auto& chunk_slots : slots_)
    for (Slot& slot : chunk_slots) {
      wait_sends(slot.output_sends);
      wait_sends(slot.grad_sends);
    }
  KINTSUGI_ASSERT(receives_.empty());
  if (!has_reduce && p > 1 && hooks.any_abandoned) abandoned = hooks.any_abandoned(draining);
  return !abandoned;
}

}  // namespace kintsugi
