#pragma once
// What every part of one rank's training run (training_run.hpp) reads: the config resolved for
// the job, where this rank sits, its model and the backend under it, the data, and the batch and
// learning rate every step takes. Built once; only the batch schedule changes (on resume).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/core/trace.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/place.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/train/trainer.hpp"

namespace kintsugi {

struct RunContext {
  // Resolves parallel.dp for the job (a single process may pass dp = 0) and builds the model.
  RunContext(const RunConfig& config, TrainInputs& data, const TrainOptions& options,
             std::ostream& log, const Topology* topology);

  // The job's world communicator, or null for a single process (agree_on_error's argument).
  Communicator* world() const { return topology ? &topology->world() : nullptr; }

  const RunConfig config;
  const TrainConfig& tc;
  TrainInputs& data;
  const TrainOptions& options;
  std::ostream& log;
  const Topology* topology;
  const Place place;
  MemoryTracker memory;
  std::unique_ptr<Backend> backend;
  Tracer tracer;
  StageModel model;
  const int micro_batches;              // per data-parallel rank, at the full global batch
  const std::int64_t tokens_per_step;  // at the full global batch
  const LrSchedule schedule;
  const BatchLrRule lr_rule;
  BatchSchedule batches;  // every step's global batch (a ramp-up's); set again on resume
  const std::filesystem::path out;
};

}  // namespace kintsugi
