#include "kintsugi/parallel/pipeline_executor.hpp"

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
    const std::size_t tokens = static_cast<std::size_t>(c->micro_batch() * c->seq());
    slots_.emplace_back(c->slots());
    for (Slot& s : slots_.back()) {
      s.tokens.resize(tokens);
      s.targets.resize(tokens);
    }
  }
}

int PipelineExecutor::slot_of(int mb) const {
  // A chunk runs its micro-batches' forwards and backwards in order, so those in flight are
  // consecutive and mb modulo the slot count never collides.
  return mb % chunks_.front()->slots();
}

void PipelineExecutor::wait_sends(Slot& slot) {
  for (auto& h : slot.sends) h.wait();
  slot.sends.clear();
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

void PipelineExecutor::run(const std::vector<PipeInstruction>& program, bool training,
                           double grad_scale, const Hooks& hooks) {
  const int p = shape_.stages, chunks_total = shape_.stages * shape_.virtual_stages;
  compute_seconds_ = 0;
  peak_in_flight_ = 0;
  int in_flight = 0;
  for (const PipeInstruction& in : program) {
    ModelChunk* chunk = in.op == PipeOp::reduce_grads || in.op == PipeOp::optimizer_step
                            ? nullptr
                            : chunks_[in.chunk];
    Slot* slot = chunk ? &slots_[in.chunk][slot_of(in.micro_batch)] : nullptr;
    const int s = slot_of(in.micro_batch);
    const int g = global_chunk(shape_, rank_, in.chunk);
    switch (in.op) {
      case PipeOp::recv_forward:
        wait_sends(*slot);  // the slot's buffers are reused: earlier sends must be done
        receives_[{kForward, in.chunk, in.micro_batch}] =
            pp_->recv_async(chunk->input(s), (g - 1) % p);
        break;
      case PipeOp::forward: {
        wait_receive(kForward, in.chunk, in.micro_batch);
        wait_sends(*slot);
        hooks.sample(in.micro_batch, slot->tokens.data(), slot->targets.data());
        if (!chunk->tokens(s).empty()) copy_from_host(slot->tokens.data(), chunk->tokens(s));
        if (!chunk->targets(s).empty()) copy_from_host(slot->targets.data(), chunk->targets(s));
        const double start = tracer_.now();
        chunk->forward(s, training, grad_scale);
        compute_seconds_ += tracer_.now() - start;
        tracer_.record(fmt::format("F c{} mb{}", g, in.micro_batch), 0, start, tracer_.now());
        peak_in_flight_ = std::max(peak_in_flight_, ++in_flight);
        if (!training) --in_flight;
        tracer_.counter("micro-batches in flight", in_flight);
        break;
      }
      case PipeOp::send_forward:
        slot->sends.push_back(pp_->send_async(chunk->output(s), (g + 1) % p));
        break;
      case PipeOp::recv_backward:
        wait_sends(*slot);
        receives_[{kBackward, in.chunk, in.micro_batch}] =
            pp_->recv_async(chunk->grad(s), (g + 1) % p);
        break;
      case PipeOp::backward: {
        wait_receive(kBackward, in.chunk, in.micro_batch);
        const double start = tracer_.now();
        chunk->backward(s, in.micro_batch == shape_.micro_batches - 1);
        compute_seconds_ += tracer_.now() - start;
        tracer_.record(fmt::format("B c{} mb{}", g, in.micro_batch), 0, start, tracer_.now());
        --in_flight;
        tracer_.counter("micro-batches in flight", in_flight);
        break;
      }
      case PipeOp::send_backward:
        slot->sends.push_back(pp_->send_async(chunk->grad(s), (g - 1 + chunks_total) % p));
        break;
      case PipeOp::reduce_grads: {
        const double start = tracer_.now();
        hooks.reduce_grads();
        tracer_.record("reduce gradients", 1, start, tracer_.now());
        break;
      }
      case PipeOp::optimizer_step: {
        const double start = tracer_.now();
        hooks.optimizer_step();
        tracer_.record("optimizer", 0, start, tracer_.now());
        break;
      }
    }
  }
  for (auto& chunk_slots : slots_)
    for (Slot& slot : chunk_slots) wait_sends(slot);
  KINTSUGI_ASSERT(receives_.empty());
}

}  // namespace kintsugi
