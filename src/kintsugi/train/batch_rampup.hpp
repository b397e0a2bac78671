#pragma once
// Batch-size ramp-up (Megatron-LM's --rampup-batch-size START INCREMENT RAMP_SAMPLES) and a
// learning-rate rule tied to the batch (docs/config.md, "Batch-size ramp-up").
//
// With train.batch_rampup = [start, increment, samples] and G = train.global_batch, the global
// batch of a step is a pure function of the samples (sequences) consumed before it, c:
//   n = (G - start) / increment                 increments (start + n increment = G exactly)
//   batch(c) = G                                 if c >= samples
//            = start + floor(c n / samples) increment   otherwise
// This is Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator, with its floating-point
// floor(c / (samples / n)) computed in exact integers, so that every rank, a resumed run and the serial oracle agree on every step's
// batch. Each step's batch is split as the full one is: batch / dp sequences per data-parallel
// rank, in batch / (dp micro_batch) accumulated micro-batches; every batch of the ramp must
// divide so (resolve_layout refuses the config otherwise). The data of step s is sequences
// [0, batch(s)) of step s's global batch (data/batch_sampler.hpp), the same sequences a run
// without the ramp would start its step s with.
//
// The learning-rate rule scales the schedule's rate by (batch / G)^p while the batch ramps:
// p = 1 ("linear": Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1
// Hour", arXiv:1706.02677, Sec. 2.1), p = 1/2 ("sqrt": Krizhevsky 2014, "One weird trick for
// parallelizing convolutional neural networks", arXiv:1404.5997, Sec. 5; derived for Adam by
// Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms",
// NeurIPS 2022). "none" (the default) leaves the schedule alone, as Megatron-LM does.
#include <cstdint>
#include <string>
#include <vector>

namespace kintsugi {

struct TrainConfig;

struct BatchRampup {
  std::int64_t start = 0, increment = 0, samples = 0;
  bool enabled() const { return start > 0; }
};

// train.batch_rampup as a ramp ([] : none); kintsugi::Error when it is not three positive
// numbers with start <= global_batch and (global_batch - start) divisible by increment.
BatchRampup batch_rampup_of(const TrainConfig& train);

// The global batch after `consumed` sequences (the formula above); global_batch without a ramp.
std::int64_t ramped_batch(const BatchRampup& ramp, std::int64_t global_batch,
                          std::int64_t consumed);

// The optimizer steps a run takes to consume at least `sequences` sequences, the ramp's smaller
// batches included (`kintsugi plan --write-config`'s train.steps for a token budget).
std::int64_t steps_to_consume(const BatchRampup& ramp, std::int64_t global_batch,
                              std::int64_t sequences);

// The global batches a layout check must see for the ramp to split over it everywhere: its
// first two batches and the full one ({global_batch} without a ramp). The ramp's batches form
// the progression start + k increment, and every rule on the batch (resolve_layout) is a
// divisibility, which holds for the whole progression when it holds for its first two terms,
// or a bound, which the smallest or the largest batch meets worst; a ramp of millions of
// batches is checked in three.
std::vector<std::int64_t> ramp_batches_to_check(const BatchRampup& ramp, std::int64_t global_batch);

enum class BatchLrRule { none, sqrt, linear };
BatchLrRule batch_lr_rule_of(const std::string& name);  // kintsugi::Error on an unknown name
// The factor on the schedule's learning rate at a step of `batch` sequences.
double batch_lr_factor(BatchLrRule rule, std::int64_t batch, std::int64_t global_batch);

// Every step's global batch and the sequences consumed before it, for one run. Steps before
// `start_step` (done by a checkpoint's run) replay the ramp from step 0; from `start_step` on,
// the ramp continues from `consumed_at_start` (the checkpoint's count), so a resumed run takes
// the batches the uninterrupted one took whenever the checkpoint came from the same ramp.
//
// Nothing is stored per step (train.steps may be 1e12): a step's count is found by walking the
// ramp one batch size at a time, each size's steps in one division, from the last step asked
// (the trainer asks step after step) or from the start.
class BatchSchedule {
 public:
  BatchSchedule(const TrainConfig& train, std::int64_t start_step = 0,
                std::int64_t consumed_at_start = -1);  // -1: the replayed count
  std::int64_t batch(std::int64_t step) const;            // sequences of step `step` (0-based)
  std::int64_t consumed_before(std::int64_t step) const;  // sequences of steps 0..step-1
  std::int64_t max_batch() const { return global_batch_; }
  std::int64_t steps() const { return steps_; }
  bool ramped() const { return ramp_.enabled(); }
  const BatchRampup& ramp() const { return ramp_; }
  // The replayed count at start_step: what an uninterrupted run of this config had consumed.
  std::int64_t replayed_consumed_at_start() const { return replayed_at_start_; }
  // The first step whose batch is the full one (0 without a ramp; steps() if none is).
  std::int64_t first_full_step() const;
  // The first step after `step` whose batch differs from step `step`'s (steps() if none does).
  std::int64_t next_batch_change(std::int64_t step) const;

 private:
  struct Point {
    std::int64_t step = 0, consumed = 0;  // sequences consumed before `step`
  };
  // Steps from `from` until the batch may change: the next increment of the ramp (or, before
  // start_step, the resume point); `limit` steps at most.
  std::int64_t steps_at_this_batch(const Point& from, std::int64_t limit) const;
  // The point at `step`, walked from `from` (from.step <= step).
  Point walk(Point from, std::int64_t step) const;
  // Where a walk to `step` may start: step 0, or the resume point for steps from it.
  Point origin_of(std::int64_t step) const;

  BatchRampup ramp_;
  std::int64_t global_batch_, steps_;
  Point start_;  // start_step and the count the run continues from
  std::int64_t replayed_at_start_ = 0;
  mutable Point cursor_;  // the last point asked: the next question usually walks one step
};

}  // namespace kintsugi
