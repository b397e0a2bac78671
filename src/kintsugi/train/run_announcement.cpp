// TrainingRun's announcement (training_run.hpp): the log's header, which says what this run
// is (model, layout, batch, data, the MFU peak, communication in theory, what a resume or
// initial weights change), run.json, and the metrics file opened for the steps to come.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <filesystem>
#include <ostream>

#include "kintsugi/core/threads.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/resume_notes.hpp"
#include "kintsugi/train/run_description.hpp"
#include "kintsugi/train/train_data.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

// The log's header, run.json and the metrics file (rank 0).
void TrainingRun::announce() {
  if (!ctx_.place.chief) return;
  const RunConfig& config = ctx_.config;
  const TrainConfig& tc = ctx_.tc;
  std::ostream& log = ctx_.log;
  throughput_.measure_peak(config, *ctx_.backend);
  std::filesystem::create_directories(ctx_.out);
  records_.open(summary_.metrics_path, ctx_.options.resume ? progress_.start_step : -1,
                config.metrics.tensorboard_dir);
  const ModelConfig& mc = config.model;
  fmt::print(log,
             "kintsugi train | {} | model {} ({} layers, d {}, {} heads, {:.2f}M parameters{}) | "
             "{} thread{} per rank, {} backend | {}\n",
             config.source, mc.name, mc.n_layer, mc.d_model, mc.n_head,
             parameter_count(mc) / 1e6,
             mc.is_moe() ? fmt::format(", {:.2f}M active: {} experts, top {}",
                                       active_parameter_count(mc) / 1e6, mc.moe.experts,
                                       mc.moe.top_k)
                         : std::string(),
             compute_threads(), compute_threads() == 1 ? "" : "s",
             ctx_.backend->name(), describe_numerics(config));
  fmt::print(log,
             "layout: {} | global batch {} x {} tokens = {} tokens/step, {} micro-batch{} of {} "
             "per data-parallel rank | {:.3f} GFLOP/step (model FLOPs)\n",
             describe_layout(config, ctx_.place, ctx_.model), tc.global_batch, mc.seq_len,
             ctx_.tokens_per_step, ctx_.micro_batches, ctx_.micro_batches == 1 ? "" : "es",
             tc.micro_batch, throughput_.flops_per_step() / 1e9);
  if (ctx_.batches.ramped()) fmt::print(log, "{}\n", describe_rampup());
  fmt::print(log, "{}\n", energy_->description());  // once: what is measured, or why not
  fmt::print(log, "data: train {} | val {}\n", describe_data(ctx_.data.train),
             ctx_.data.val ? describe_data(*ctx_.data.val)
                           : std::string("none (no data.val: evaluation skipped)"));
  throughput_.share_cores(config, ctx_.place, ctx_.options.ranks_per_node, log);
  const auto comm = expected_comm_bytes(config, ctx_.place, ctx_.model);
  if (!comm.empty()) {
    std::string text;
    for (const auto& [key, bytes] : comm)
      text += fmt::format(" {} {}", key, format_bytes(static_cast<std::size_t>(bytes)));
    fmt::print(log, "communication per step of rank 0 (theory):{}\n", text);
  }
  write_run_description(ctx_.out / "run.json", config, ctx_.place, ctx_.model);
  if (ctx_.options.init && !ctx_.options.resume)
    fmt::print(log,
               "initial weights from {} (weights only: step 0, new optimizer state and "
               "learning-rate schedule)\n",
               ctx_.options.init->source());
  if (ctx_.options.resume) announce_resume();
}

// Where a resumed run comes from, and what it changes.
void TrainingRun::announce_resume() {
  const CheckpointInfo& resume = *ctx_.options.resume;
  const auto& layout = resume.manifest.at("layout");
  fmt::print(ctx_.log,
             "resumed from {} at step {} (saved by {} rank{}: tp {} x pp {} x dp {}, ZeRO-{}); "
             "loaded in {:.2f} s\n",
             resume.dir.string(), progress_.start_step, layout.value("world", 1),
             layout.value("world", 1) == 1 ? "" : "s", layout.value("tp", 1),
             layout.value("pp", 1), layout.value("dp", 1), layout.value("zero", 0),
             progress_.load_seconds);
  for (const std::string& note : schedule_change_notes(layout, ctx_.tc, progress_.start_step))
    fmt::print(ctx_.log, "{}\n", note);
  for (const std::string& note : progress_.resume_notes) fmt::print(ctx_.log, "{}\n", note);
}

// The ramp-up's log line: its batches, the steps at which each starts (as this run takes them;
// the first few and the full batch's of a ramp with many) and the learning-rate rule.
std::string TrainingRun::describe_rampup() const {
  const BatchSchedule& batches = ctx_.batches;
  const TrainConfig& tc = ctx_.tc;
  const BatchRampup& r = batches.ramp();
  constexpr int kListed = 8;
  std::string steps;
  int listed = 0;
  for (std::int64_t s = 0; s < tc.steps; s = batches.next_batch_change(s)) {
    if (++listed > kListed) {
      const std::int64_t full = batches.first_full_step();
      steps += full < tc.steps ? fmt::format(", ..., {} from step {}", tc.global_batch, full + 1)
                               : ", ...";
      break;
    }
    steps += fmt::format("{}{} from step {}", steps.empty() ? "" : ", ", batches.batch(s), s + 1);
  }
  return fmt::format("batch ramp-up: {} -> {} sequences by {} over {} samples ({}) | "
                     "learning rate {}",
                     r.start, tc.global_batch, r.increment, r.samples, steps,
                     ctx_.lr_rule == BatchLrRule::none
                         ? std::string("as scheduled")
                         : fmt::format("x (batch / {})^{}", tc.global_batch,
                                       ctx_.lr_rule == BatchLrRule::sqrt ? "1/2" : "1"));
}

}  // namespace kintsugi
