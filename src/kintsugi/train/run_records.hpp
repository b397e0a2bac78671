#pragma once
// What a training run writes as it goes: the loss curve (every rank keeps it) and, on rank 0,
// metrics.jsonl and TensorBoard's event file. A write that fails (a full disk) does not end the
// step that made it: it is kept in `write_error`, and the step boundary saves a checkpoint and
// then ends the job with the message (training_run.hpp).
#include <cstdint>
#include <optional>
#include <string>

#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/step_metrics.hpp"
#include "kintsugi/train/tensorboard_writer.hpp"

namespace kintsugi {

struct RunRecords {
  // Rank 0: opens the metrics file (a resumed run keeps its lines through `keep_through_step`;
  // -1: a new file) and, with a directory, an event file.
  void open(const std::string& metrics_path, std::int64_t keep_through_step,
            const std::string& tensorboard_dir);
  // Rank 0: the validation loss before any training, as step 0.
  void write_initial_evaluation(double val_loss);
  // Rank 0: one step's line and scalars.
  void write(const StepMetrics& m);
  // The summary line's validation part: this run's first and last evaluations (before an
  // earlier run's join the curve), each with its step when it is not the run's first or last.
  std::string val_summary(std::int64_t steps_done) const;

  std::optional<MetricsWriter> metrics;
  std::optional<TensorBoardWriter> tensorboard;  // with metrics.tensorboard_dir
  LossCurve curve;
  std::string write_error;  // rank 0: metrics.jsonl or the event file could not be written
};

}  // namespace kintsugi
