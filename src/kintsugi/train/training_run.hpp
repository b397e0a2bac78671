#pragma once
// One rank's training run, the engine of train() (trainer.hpp), in the order it takes its steps:
// restore the state, announce the run, then per optimizer step: step, report, checkpoint;
// finally save and summarize. Its state comes in parts, each with one job: the fixed context
// (run_context.hpp), the rates against the hardware (run_throughput.hpp) and the energy
// measured (job_energy.hpp), the records written as it goes (run_records.hpp), how far it has
// got (RunProgress) and the summary it returns.
// Its work is split over files by job:
//   trainer.cpp             restore and the step loop
//   run_announcement.cpp    the log's header, run.json and the metrics file's opening
//   training_step.cpp       one optimizer step and what it measured
//   run_reporting.cpp       each step's report and the run's end (the model, the plots)
//   run_validation.cpp      evaluations and the divergence check of every save
//   checkpoint_cadence.cpp  training checkpoints when due or when the job is asked to stop
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/core/timer.hpp"
#include "kintsugi/train/job_energy.hpp"
#include "kintsugi/train/run_context.hpp"
#include "kintsugi/train/run_records.hpp"
#include "kintsugi/train/run_throughput.hpp"
#include "kintsugi/train/step_metrics.hpp"
#include "kintsugi/train/trainer.hpp"

namespace kintsugi {

// How far the run has got, and what it has counted on the way.
struct RunProgress {
  std::int64_t start_step = 0;  // the resumed checkpoint's step, else 0
  std::int64_t steps_done = 0;
  std::int64_t saved_step = -1;  // the step of the newest training checkpoint this run wrote
  std::optional<double> last_val_loss;  // of step steps_done, when it was evaluated
  double best_val = 0;  // the lowest sound validation loss of this run
  int stop_checks = 0;  // micro-batches of the current step or evaluation that every rank runs
  double load_seconds = 0;  // reading the checkpoint resumed from
  std::vector<std::string> resume_notes;  // what the log says about a resumed ramp-up
  std::vector<std::int64_t> dataset_tokens;  // training tokens drawn from each dataset
};

class TrainingRun {
 public:
  TrainingRun(const RunConfig& config, TrainInputs& data, const TrainOptions& options,
              std::ostream& log, const Topology* topology);
  TrainSummary run();

 private:
  // trainer.cpp
  void restore();
  bool initial_evaluation();
  // run_announcement.cpp
  void announce();
  void announce_resume();
  std::string describe_rampup() const;
  // training_step.cpp
  std::optional<StepMetrics> train_step(std::int64_t step);
  void count_dataset_tokens(std::int64_t step);
  int train_delay_ms(std::int64_t step) const;
  // run_reporting.cpp
  void report(StepMetrics& m);
  std::int64_t tokens_seen_after(std::int64_t step) const;
  void finish();
  void save_model_and_tokenizer();
  void print_summary(const std::string& val, const std::string& lr_plot);
  // run_validation.cpp
  std::optional<double> evaluate();
  double quick_validation_loss();
  int eval_delay_ms() const;
  bool diverged(double val) const;
  void refuse_diverged(std::int64_t step, std::optional<double> val);
  // checkpoint_cadence.cpp
  bool checkpoint_or_stop(const StepMetrics& m);
  void save_on_stop(std::int64_t step, std::optional<double> val);
  void save_checkpoint(std::int64_t step, std::int64_t keep);
  void stopped(std::int64_t step);
  // training_step.cpp: the fault hook's delay of a micro-batch
  static void sleep_ms(int ms);

  RunContext ctx_;
  RunThroughput throughput_;
  std::optional<JobEnergy> energy_;  // measured joules per step, where a counter is readable
  RunRecords records_;
  RunProgress progress_;
  TrainSummary summary_;
  Stopwatch run_clock_;  // since the run's parts were built
};

}  // namespace kintsugi
