#include "kintsugi/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <ostream>
#include <thread>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/core/trace.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/evaluation.hpp"
#include "kintsugi/train/job_energy.hpp"
#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/resume_notes.hpp"
#include "kintsugi/train/run_description.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/train/step_metrics.hpp"
#include "kintsugi/train/tensorboard_writer.hpp"
#include "kintsugi/train/train_data.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

// Bytes this rank has sent, per "group.operation".
std::map<std::string, std::uint64_t> bytes_sent(const Topology* t) {
  std::map<std::string, std::uint64_t> out;
  if (!t) return out;
  for (const Communicator* g : t->groups())
    for (int op = 0; op < kCommOps; ++op) {
      const CommBytes b = g->bytes(static_cast<CommOp>(op));
      if (b.sent > 0) out[fmt::format("{}.{}", g->name(), name_of(static_cast<CommOp>(op)))] = b.sent;
    }
  return out;
}

std::map<std::string, std::uint64_t> difference(const std::map<std::string, std::uint64_t>& now,
                                                const std::map<std::string, std::uint64_t>& then) {
  std::map<std::string, std::uint64_t> d;
  for (const auto& [k, v] : now) {
    auto it = then.find(k);
    const std::uint64_t delta = v - (it == then.end() ? 0 : it->second);
    if (delta > 0) d[k] = delta;
  }
  return d;
}

// Gathers every rank's events of the traced step to rank 0, which writes the trace.
void write_trace(const std::string& path, const Tracer& tracer, const Place& place) {
  const std::string mine = serialize(tracer.events());
  std::vector<std::vector<TraceEvent>> ranks = {tracer.events()};
  std::vector<std::string> names = {"rank 0"};
  if (place.topology) {
    Communicator& world = place.topology->world();
    const std::vector<std::string> all = world.host_gather(mine, 0);
    if (world.rank() != 0) return;
    for (int r = 1; r < world.size(); ++r) {
      ranks.push_back(deserialize(all[static_cast<std::size_t>(r)]));
      const RankCoords c = place.topology->map().coords(r);
      names.push_back(fmt::format("rank {} (tp {}, dp {}, pp {})", r, c.tp, c.dp, c.pp));
    }
    const RankCoords c0 = place.topology->map().coords(0);
    names[0] = fmt::format("rank 0 (tp {}, dp {}, pp {})", c0.tp, c0.dp, c0.pp);
  }
  write_chrome_trace(path, ranks, names);
}

void sleep_ms(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Whether any rank of the job received SIGTERM/SIGINT: every rank must take the same decision
// at the same step boundary, or the ones that go on would wait for the ones that stopped.
bool job_asked_to_stop(const Place& place, bool this_rank_must_stop = false) {
  double flag = stop_requested() || this_rank_must_stop ? 1.0 : 0.0;
  if (place.topology) flag = place.topology->world().host_all_reduce(flag);
  return flag > 0;
}

// The config with parallel.dp resolved for the job (a single process may pass dp = 0).
RunConfig resolved(const RunConfig& config, const Topology* topology) {
  RunConfig c = config;
  resolve_layout(c, topology ? topology->world().size() : 1);
  return c;
}

// One rank's training run, in the order train() takes its steps: restore the state, announce
// the run, then per optimizer step: step, report, checkpoint; finally save and summarize.
class TrainingRun {
 public:
  TrainingRun(const RunConfig& config, TrainInputs& data, const TrainOptions& options,
              std::ostream& log, const Topology* topology)
      : config_(resolved(config, topology)),
        tc_(config_.train),
        data_(data),
        options_(options),
        log_(log),
        topology_(topology),
        place_(topology, config_.parallel.sequence_parallel),
        backend_(make_backend(tc_.device, memory_)),
        model_(*backend_, config_, place_, tracer_),
        micro_batches_(static_cast<int>(tc_.global_batch / place_.dp_size / tc_.micro_batch)),
        tokens_per_step_(tc_.global_batch * config_.model.seq_len),
        schedule_(lr_schedule_of(tc_)),
        lr_rule_(batch_lr_rule_of(tc_.batch_lr_rule)),
        batches_(tc_),
        out_(options.out_dir) {
    const double tokens = static_cast<double>(tokens_per_step_);
    flops_per_step_ = model_flops_per_token(config_.model, config_.model.seq_len) * tokens;
    // Hardware FLOPs count the forward work recomputation repeats (HFU; MFU does not).
    hardware_flops_per_step_ =
        hardware_flops_per_token(config_.model, config_.model.seq_len,
                                 tc_.recompute == Recompute::selective,
                                 tc_.recompute == Recompute::full) *
        tokens;
    summary_.metrics_path =
        options.metrics_path.empty() ? (out_ / "metrics.jsonl").string() : options.metrics_path;
    summary_.plot_path = (out_ / "loss.svg").string();
    curve_.title = fmt::format("{} on {}", config_.model.name, describe_training_data(config_.data));
    // A stop signal is looked at before every micro-batch every rank runs, not only between
    // steps: a launcher gives a stopped job seconds, not a step's worth (docs/checkpoints.md).
    model_.set_stop_check([this](int mb) { return mb < stop_checks_; });
  }

  TrainSummary run() {
    restore();
    // Collective: every rank opens its counter.
    energy_.emplace(*backend_, topology_, options_.faults.powercap_root);
    announce();
    if (data_.val) {
      const auto initial = evaluate();
      if (!initial) {
        stopped(start_step_);
        summary_.steps = start_step_;
        return summary_;
      }
      best_val_ = *initial;
      curve_.val.emplace_back(start_step_, *initial);
      summary_.first_val_loss = summary_.last_val_loss = *initial;
      if (place_.chief) fmt::print(log_, "step {} | val loss {:.4f}\n", start_step_, *initial);
      if (start_step_ == 0) record_initial_evaluation(*initial);
    }
    steps_done_ = start_step_;
    const std::optional<RankStep>& kill_at = options_.faults.kill_rank;
    for (std::int64_t step = start_step_; step < tc_.steps; ++step) {
      if (kill_at && topology_ && topology_->world().rank() == kill_at->rank &&
          step == kill_at->step)
        std::raise(SIGKILL);  // a rank dying mid-run (tests: the job must end, not hang)
      std::optional<StepMetrics> m = train_step(step);
      if (!m) {  // stopped in the middle of the step: the last completed one is saved
        if (steps_done_ > start_step_ && saved_step_ != steps_done_)
          save_on_stop(steps_done_, last_val_loss_);
        stopped(steps_done_);
        break;
      }
      report(*m);
      steps_done_ = m->step;
      last_val_loss_ = m->val_loss;
      if (checkpoint_or_stop(*m)) break;
    }
    finish();
    return summary_;
  }

 private:
  // Weights and optimizer state: a checkpoint to resume, initial weights, or the random init
  // the model was built with.
  void restore() {
    install_stop_handlers();
    if (options_.resume) {
      const CheckpointInfo& ckpt = *options_.resume;
      Stopwatch clock;
      load_train_checkpoint(ckpt, rank_state(model_, place_));
      load_seconds_ = clock.seconds();
      // The loss scale carries over between fp16 runs; another precision starts its own.
      if (model_.loss_scaler().enabled() &&
          ckpt.manifest.at("layout").value("precision", "") == name_of(Precision::fp16))
        model_.loss_scaler().restore(ckpt.progress.loss_scaler);
      start_step_ = ckpt.progress.step;
      KINTSUGI_ASSERT(start_step_ <= tc_.steps);  // `kintsugi train` refuses such a checkpoint
      // Recorded since checkpoints carry it; before, the run's own batches are the best guess.
      // A ramp-up continues from the sequences the checkpoint's run consumed
      // (train/batch_rampup.hpp): its tokens_seen over the sequence length, exact.
      const std::int64_t seq = config_.model.seq_len;
      const bool recorded = ckpt.progress.tokens_seen >= 0 && ckpt.progress.tokens_seen % seq == 0;
      batches_ = BatchSchedule(tc_, start_step_, recorded ? ckpt.progress.tokens_seen / seq : -1);
      for (const std::string& note : rampup_resume_notes(ckpt.manifest.at("layout"), batches_,
                                                          start_step_))
        resume_notes_.push_back(note);
      for (std::int64_t step = 0; step < start_step_; ++step) count_dataset_tokens(step);
    } else if (options_.init) {
      // Shapes are checked against this rank's parameters, before any is written; the ranks
      // agree on the verdict so that one of them reports a mismatch.
      std::string error;
      try {
        options_.init->set(rank_state(model_, place_));
      } catch (const Error& e) {
        error = e.what();
      }
      agree_on_error(topology_ ? &topology_->world() : nullptr, error);
    }
  }

  // The log's header, run.json and the metrics file (rank 0).
  void announce() {
    if (!place_.chief) return;
    peak_ = config_.metrics.peak_gflops > 0
                ? GemmRate{config_.metrics.peak_gflops, compute_threads(), 0, "",
                           peak_dtype(tc_.precision), "metrics.peak_gflops from the config"}
                : local_gemm_rate(*backend_, peak_dtype(tc_.precision));
    fs::create_directories(out_);
    metrics_.emplace(summary_.metrics_path, options_.resume ? start_step_ : -1);
    if (!config_.metrics.tensorboard_dir.empty())
      tensorboard_.emplace(config_.metrics.tensorboard_dir);
    const ModelConfig& mc = config_.model;
    fmt::print(log_,
               "kintsugi train | {} | model {} ({} layers, d {}, {} heads, {:.2f}M parameters) | "
               "{} thread{} per rank, {} backend | {}\n",
               config_.source, mc.name, mc.n_layer, mc.d_model, mc.n_head,
               parameter_count(mc) / 1e6, compute_threads(), compute_threads() == 1 ? "" : "s",
               backend_->name(),
               describe_numerics(config_));
    fmt::print(log_,
               "layout: {} | global batch {} x {} tokens = {} tokens/step, {} micro-batch{} of {} "
               "per data-parallel rank | {:.3f} GFLOP/step (model FLOPs)\n",
               describe_layout(config_, place_, model_), tc_.global_batch, mc.seq_len,
               tokens_per_step_, micro_batches_, micro_batches_ == 1 ? "" : "es", tc_.micro_batch,
               flops_per_step_ / 1e9);
    if (batches_.ramped()) fmt::print(log_, "{}\n", describe_rampup());
    fmt::print(log_, "{}\n", energy_->description());  // once: what is measured, or why not
    fmt::print(log_, "data: train {} | val {}\n", describe_data(data_.train),
               data_.val ? describe_data(*data_.val)
                         : std::string("none (no data.val: evaluation skipped)"));
    // On the CPU the ranks of a node share its cores: a rank's measured rate (one rank alone
    // on the machine, at its thread count) counts only for the share of the cores it has.
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double wanted = static_cast<double>(options_.ranks_per_node) * compute_threads();
    core_share_ = tc_.device == Device::cpu ? std::min(1.0, cores / wanted) : 1.0;
    peak_total_gflops_ = peak_->gflops * place_.world * core_share_;
    if (core_share_ < 1.0)
      fmt::print(log_,
                 "MFU peak: {:.1f} GFLOP/s per rank x {} ranks x {:.2f} ({} ranks x {} thread{} "
                 "share {:.0f} cores on this node), {}\n",
                 peak_->gflops, place_.world, core_share_, options_.ranks_per_node,
                 compute_threads(), compute_threads() == 1 ? "" : "s", cores, peak_->source);
    else
      fmt::print(log_, "MFU peak: {:.1f} GFLOP/s per rank x {} rank{}, {}\n", peak_->gflops,
                 place_.world, place_.world == 1 ? "" : "s", peak_->source);
    const auto comm = expected_comm_bytes(config_, place_, model_);
    if (!comm.empty()) {
      std::string text;
      for (const auto& [key, bytes] : comm)
        text += fmt::format(" {} {}", key, format_bytes(static_cast<std::size_t>(bytes)));
      fmt::print(log_, "communication per step of rank 0 (theory):{}\n", text);
    }
    write_run_description(out_ / "run.json", config_, place_, model_);
    if (options_.init && !options_.resume)
      fmt::print(log_,
                 "initial weights from {} (weights only: step 0, new optimizer state and "
                 "learning-rate schedule)\n",
                 options_.init->source());
    if (options_.resume) {
      const auto& layout = options_.resume->manifest.at("layout");
      fmt::print(log_,
                 "resumed from {} at step {} (saved by {} rank{}: tp {} x pp {} x dp {}, ZeRO-{}); "
                 "loaded in {:.2f} s\n",
                 options_.resume->dir.string(), start_step_, layout.value("world", 1),
                 layout.value("world", 1) == 1 ? "" : "s",
                 layout.value("tp", 1), layout.value("pp", 1), layout.value("dp", 1),
                 layout.value("zero", 0), load_seconds_);
      for (const std::string& note : schedule_change_notes(layout, tc_, start_step_))
        fmt::print(log_, "{}\n", note);
      for (const std::string& note : resume_notes_) fmt::print(log_, "{}\n", note);
    }
  }

  // The fault hook's delay of every evaluation micro-batch after the first step, and of every
  // training micro-batch of step `step` (0-based; the hook counts from 1, as the log does).
  int eval_delay_ms() const {
    const auto& slow = options_.faults.slow_micro_batches;
    return slow && slow->evaluation && steps_done_ > start_step_ ? slow->ms : 0;
  }
  int train_delay_ms(std::int64_t step) const {
    const auto& slow = options_.faults.slow_micro_batches;
    return slow && !slow->evaluation && step + 1 >= slow->from_step ? slow->ms : 0;
  }

  // Validation loss per token: eval_sequences_of evenly spread windows (the same set whatever
  // the layout), in micro-batches shared out round-robin across the data-parallel ranks; none
  // when a stop signal ended it.
  std::optional<double> evaluate() {
    const std::int64_t windows = eval_sequences_of(tc_);
    const std::int64_t batches = (windows + tc_.micro_batch - 1) / tc_.micro_batch;
    stop_checks_ = static_cast<int>(batches / place_.dp_size);  // every rank has these
    const int delay = eval_delay_ms();
    return mean_window_loss(model_, place_, *data_.val, windows, tc_.micro_batch,
                            [delay] { sleep_ms(delay); });
  }

  // Adds the tokens of step `step`'s global batch to the dataset each sequence came from.
  // Training tokens of steps 1..step: the resumed steps at the batch they had, this run's at its.
  std::int64_t tokens_seen_after(std::int64_t step) const {
    return batches_.consumed_before(step) * config_.model.seq_len;
  }

  // The ramp-up's log line: its batches, the steps at which each starts (as this run takes them;
  // the first few and the full batch's of a ramp with many) and the learning-rate rule.
  std::string describe_rampup() const {
    const BatchRampup& r = batches_.ramp();
    constexpr int kListed = 8;
    std::string steps;
    int listed = 0;
    for (std::int64_t s = 0; s < tc_.steps; s = batches_.next_batch_change(s)) {
      if (++listed > kListed) {
        const std::int64_t full = batches_.first_full_step();
        steps += full < tc_.steps
                     ? fmt::format(", ..., {} from step {}", tc_.global_batch, full + 1)
                     : ", ...";
        break;
      }
      steps += fmt::format("{}{} from step {}", steps.empty() ? "" : ", ", batches_.batch(s),
                           s + 1);
    }
    return fmt::format("batch ramp-up: {} -> {} sequences by {} over {} samples ({}) | "
                       "learning rate {}",
                       r.start, tc_.global_batch, r.increment, r.samples, steps,
                       lr_rule_ == BatchLrRule::none
                           ? std::string("as scheduled")
                           : fmt::format("x (batch / {})^{}", tc_.global_batch,
                                         lr_rule_ == BatchLrRule::sqrt ? "1/2" : "1"));
  }

  void count_dataset_tokens(std::int64_t step) {
    dataset_tokens_.resize(data_.train.num_sources());
    for (std::int64_t i = 0; i < batches_.batch(step); ++i)
      dataset_tokens_[data_.train.source_of(step, i)] += config_.model.seq_len;
  }

  // One optimizer step over this rank's micro-batches, with what it measured; none when a stop
  // signal ended it before the optimizer ran.
  std::optional<StepMetrics> train_step(std::int64_t step) {
    const bool traced = !options_.trace_path.empty() && step + 1 == tc_.steps;
    if (traced && topology_) topology_->world().barrier();  // one time origin for all ranks
    tracer_.start(traced, backend_->timeline());
    const auto bytes_before = bytes_sent(topology_);
    // The step's global batch (a ramp-up's, train/batch_rampup.hpp) split as the full one is.
    const std::int64_t batch = batches_.batch(step), rank_batch = batch / place_.dp_size;
    const int micro_batches = static_cast<int>(rank_batch / tc_.micro_batch);
    const std::int64_t step_tokens = batch * config_.model.seq_len;
    const std::int64_t first_sequence = place_.dp_rank * rank_batch, mb = tc_.micro_batch;
    // 3D tensor parallelism: z rank k runs sequences [k mb / z, (k + 1) mb / z) of each
    // micro-batch (docs/parallelism.md).
    const std::int64_t share = mb / place_.depth_size, share_begin = place_.depth_rank * share;
    energy_->begin();  // the first step's: the first span of the job's energy starts here
    Stopwatch clock;
    const double lr = schedule_.at(step) * batch_lr_factor(lr_rule_, batch, tc_.global_batch);
    stop_checks_ = micro_batches;
    const int delay = train_delay_ms(step);
    const auto result = model_.train_step(
        [&](int k, std::int32_t* tokens, std::int32_t* targets) {
          data_.train.sample(step, first_sequence + k * mb + share_begin, share, tokens, targets);
          sleep_ms(delay);
        },
        micro_batches, 1.0 / static_cast<double>(step_tokens), lr, tc_.grad_clip);
    if (model_.interrupted()) return std::nullopt;
    const double seconds = clock.seconds();
    // Collective, like the loss's sum.
    const std::optional<EnergySpan> energy = energy_->end(step_tokens);

    StepMetrics m;
    m.step = step + 1;
    m.loss = result.loss_sum / static_cast<double>(step_tokens);
    m.global_batch = batch;
    m.lr = lr;
    m.grad_norm = result.grad_norm;
    if (model_.loss_scaler().enabled()) {
      m.loss_scale = result.loss_scale;
      m.skipped = result.skipped;
    } else if (result.skipped) {
      fail("the gradient became non-finite at step {} (norm {}): lower train.lr or raise "
           "train.warmup_steps",
           m.step, result.grad_norm);
    }
    if (!std::isfinite(m.loss))
      fail("the loss became {} at step {}: lower train.lr or raise train.warmup_steps", m.loss,
           m.step);
    m.step_seconds = seconds;
    // FLOPs scale with the step's tokens (a ramp-up's smaller batches do less work).
    const double of_full = static_cast<double>(batch) / static_cast<double>(tc_.global_batch);
    m.tokens_per_s = static_cast<double>(step_tokens) / seconds;
    m.model_tflops = of_full * flops_per_step_ / seconds / 1e12;
    if (peak_) {
      m.mfu = of_full * flops_per_step_ / seconds / (peak_total_gflops_ * 1e9);
      m.hfu = of_full * hardware_flops_per_step_ / seconds / (peak_total_gflops_ * 1e9);
      // Above 100% the peak is wrong, not the run: a rate measured while other work shared the
      // cores under-reports the machine (docs/metrics.md, "MFU and the peak").
      if (m.mfu > 1.0 && !peak_warned_) {
        peak_warned_ = true;
        const bool configured = config_.metrics.peak_gflops > 0;
        fmt::print(log_,
                   "note: MFU above 100%: this run does {:.1f} GFLOP/s, more than the peak it is "
                   "divided by ({:.1f} GFLOP/s: {}); {}\n",
                   m.model_tflops * 1e3, peak_total_gflops_, peak_->source,
                   configured ? "raise metrics.peak_gflops"
                              : "a rate measured while the machine was busy is too low: run "
                                "`kintsugi bench gemm` on a quiet machine to measure it again");
      }
    }
    m.comm_bytes = difference(bytes_sent(topology_), bytes_before);
    if (energy) {
      m.energy_j = energy->joules;
      m.energy_seconds = energy->seconds;
      m.joules_per_token = energy->joules / static_cast<double>(energy->tokens);
    }
    count_dataset_tokens(step);
    for (std::size_t k = 0; k < dataset_tokens_.size(); ++k)
      m.dataset_tokens[data_.train.tokens(k).path().string()] += dataset_tokens_[k];
    if (place_.pp) m.bubble = 1.0 - model_.compute_seconds() / seconds;
    if (traced) {
      tracer_.resolve();  // the GPU's spans, once it has run them
      write_trace(options_.trace_path, tracer_, place_);
    }
    return m;
  }

  // The validation loss before any training, as step 0 of metrics.jsonl and TensorBoard (a
  // resumed run's first evaluation repeats the checkpoint step's, which is there already).
  void record_initial_evaluation(double val_loss) {
    if (!place_.chief) return;
    try {
      metrics_->write_initial_evaluation(val_loss);
      if (tensorboard_) tensorboard_->write_scalars(0, {{"val/loss", val_loss}});
    } catch (const Error& e) {  // the first step's report ends the job with the message
      write_error_ = e.what();
    }
  }

  // Evaluation when due, memory, the loss curve, throughput, the metrics line and the log.
  void report(StepMetrics& m) {
    const bool last = m.step == tc_.steps;
    if (data_.val && (last || (tc_.eval_every > 0 && m.step % tc_.eval_every == 0))) {
      m.val_loss = evaluate();  // none if stopped: the step is saved at its boundary
      if (m.val_loss) {
        curve_.val.emplace_back(m.step, *m.val_loss);
        summary_.last_val_loss = *m.val_loss;
        if (!diverged(*m.val_loss)) best_val_ = std::min(best_val_, *m.val_loss);
      }
    }
    for (int k = 0; k < kMemoryKinds; ++k) {
      m.memory_current[k] = memory_.current(static_cast<MemoryKind>(k));
      m.memory_peak[k] = memory_.peak(static_cast<MemoryKind>(k));
    }
    m.activations_in_flight = model_.peak_in_flight();
    m.tokens_seen = tokens_seen_after(m.step);
    m.samples_seen = batches_.consumed_before(m.step);
    m.elapsed_seconds = run_clock_.seconds();
    curve_.train.emplace_back(m.step, m.loss);
    if (m.step == start_step_ + 1) summary_.first_loss = m.loss;
    summary_.last_loss = m.loss;
    // Throughput over every step but the first (warm-up), unless there is only one.
    const std::int64_t steps = tc_.steps - start_step_;
    if (m.step > start_step_ + 1 || steps == 1) {
      timed_seconds_ += m.step_seconds;
      timed_tokens_ += static_cast<double>(m.global_batch * config_.model.seq_len);
      summary_.tokens_per_s = timed_tokens_ / timed_seconds_;
    }
    if (!place_.chief) return;
    try {
      metrics_->write(m);
      if (tensorboard_) tensorboard_->write_scalars(m.step, tensorboard_scalars(m));
    } catch (const Error& e) {  // the job saves this step, then ends with the message
      write_error_ = e.what();
    }
    if (m.step % tc_.log_every == 0 || last || m.val_loss) {
      const double eta = run_clock_.seconds() / static_cast<double>(m.step - start_step_) *
                         static_cast<double>(tc_.steps - m.step);
      fmt::print(log_, "{}\n", format_step_line(m, tc_.steps, eta));
      log_.flush();
    }
  }

  // Step boundary: a checkpoint when due or when the job is asked to stop. Returns whether to
  // stop.
  bool checkpoint_or_stop(const StepMetrics& m) {
    const bool stop = job_asked_to_stop(place_, !write_error_.empty());
    const bool due = tc_.save_every > 0 && (m.step % tc_.save_every == 0 || m.step == tc_.steps);
    if (stop) {
      save_on_stop(m.step, m.val_loss);
    } else if (due) {
      // An evaluation cut short by a signal that came meanwhile leaves the quick check.
      refuse_diverged(m.step, m.val_loss ? m.val_loss : evaluate());
      save_checkpoint(m.step, tc_.keep_checkpoints);
    }
    if (!write_error_.empty())
      fail("{}; stopped after step {} (saved {})", write_error_, m.step,
           summary_.last_train_checkpoint);
    if (stop) stopped(m.step);
    return stop;
  }

  // Whether a validation loss says the run diverged: not finite, or worse than a uniform guess
  // over the vocabulary (ln V) and more than 1.5 x the best this run has seen.
  bool diverged(double val) const {
    const double uniform = std::log(static_cast<double>(config_.model.vocab_size));
    return !std::isfinite(val) || (val > uniform && val > 1.5 * best_val_);
  }

  // Before every save: the weights about to be saved are those after step `step`'s update,
  // which its training loss has not seen, so their validation loss decides: `val` (the step's
  // own evaluation, or one measured for the save), else the quick one below. A diverged state
  // is never saved, so `latest` and the newest checkpoints that pruning keeps are sound ones.
  void refuse_diverged(std::int64_t step, std::optional<double> val) {
    if (!data_.val) return;  // without validation data only the save's finite checks remain
    if (!val) val = quick_validation_loss();
    if (!diverged(*val)) return;
    std::string last = summary_.last_train_checkpoint;
    if (last.empty() && options_.resume) last = options_.resume->dir.string();
    agree_on_error(topology_ ? &topology_->world() : nullptr,
                   fmt::format("the run diverged: after step {} the validation loss is {:.4g} "
                               "(best {:.4g}, a uniform guess {:.4g}); step {} was not saved; "
                               "{}: lower train.lr or raise train.warmup_steps",
                               step, *val, best_val_,
                               std::log(static_cast<double>(config_.model.vocab_size)), step,
                               last.empty() ? "no checkpoint was saved" : "resume from " + last));
  }

  // The validation loss of one micro-batch per data-parallel rank, which no stop signal cuts
  // short: the check of a save on a stop signal (a launcher gives the job seconds, not an
  // evaluation's worth) and of one whose evaluation a signal ended. A diverged state's loss is
  // far above both bounds of diverged(), so a small sample tells it apart.
  double quick_validation_loss() {
    stop_checks_ = 0;  // no micro-batch looks for a stop signal
    const int delay = eval_delay_ms();
    const auto loss = mean_window_loss(model_, place_, *data_.val, place_.dp_size * tc_.micro_batch,
                                       tc_.micro_batch, [delay] { sleep_ms(delay); });
    KINTSUGI_ASSERT(loss.has_value());
    return *loss;
  }

  // The save when the job is asked to stop: the same checks as a scheduled save, with the
  // quick validation loss when the step has none of its own. It prunes nothing: the
  // checkpoints before it stay until the next scheduled save, whose evaluation vouches for its
  // state with the whole validation sample (docs/checkpoints.md).
  void save_on_stop(std::int64_t step, std::optional<double> val) {
    refuse_diverged(step, val);
    save_checkpoint(step, 0);
  }

  // A training checkpoint of the state after `step` (the weights and optimizer state now),
  // keeping the newest `keep` checkpoints (0: all).
  void save_checkpoint(std::int64_t step, std::int64_t keep) {
    const TrainProgress progress{.step = step,
                                 .optimizer_steps = model_.state(0).optimizer().steps_taken(),
                                 .loss_scaler = model_.loss_scaler().state(),
                                 .seed = tc_.seed,
                                 .tokens_seen = tokens_seen_after(step)};
    nlohmann::json layout = layout_json(config_, place_);
    layout["lr_schedule"] = lr_schedule_json(tc_);  // a resumed run says what it changes
    if (batches_.ramped()) layout["batch_rampup"] = batch_rampup_json(tc_, batches_, step);
    Stopwatch clock;
    saved_step_ = step;
    summary_.last_train_checkpoint =
        save_train_checkpoint(out_ / "checkpoints", config_.model, layout, progress,
                              rank_state(model_, place_), keep, options_.tokenizer,
                              options_.faults.die_in_save)
            .string();
    if (place_.chief)
      fmt::print(log_, "saved checkpoint {} in {:.2f} s\n", summary_.last_train_checkpoint,
                 clock.seconds());
  }

  // The run ends after `step` because a stop signal arrived.
  void stopped(std::int64_t step) {
    summary_.stopped = true;
    if (!place_.chief) return;
    if (summary_.last_train_checkpoint.empty() && options_.resume)
      summary_.last_train_checkpoint = options_.resume->dir.string();
    if (summary_.last_train_checkpoint.empty())
      fmt::print(log_, "stopped by a signal before the first step ended: nothing to save\n");
    else
      fmt::print(log_, "stopped by a signal after step {}: continue with --resume auto (or "
                       "--resume {})\n",
                 step, summary_.last_train_checkpoint);
    log_.flush();
  }

  // data.tokenizer's files next to the saved model, so that `generate` and `export` find them
  // from any directory; a tokenizer that cannot be loaded is reported, not fatal.
  void save_tokenizer(const std::string& dir) {
    try {
      data::load_tokenizer(config_.data.tokenizer, "data.tokenizer")->save(dir, config_.model.seq_len);
    } catch (const Error& e) {
      fmt::print(log_, "note: no tokenizer saved with the model ({})\n", e.what());
    }
  }

  // The trained model (gathered to rank 0 from data-parallel replica 0's stages), the loss
  // curve and the summary line.
  void finish() {
    summary_.steps = steps_done_;
    if (peak_)
      summary_.mfu = summary_.tokens_per_s / static_cast<double>(tokens_per_step_) *
                     flops_per_step_ / (peak_total_gflops_ * 1e9);
    if (tc_.save_checkpoint && !summary_.stopped) {
      // ZeRO-3 gathers weights from the whole data-parallel group, so every rank takes part.
      model_.acquire_all_params();
      if (place_.dp_rank == 0) {
        summary_.checkpoint_dir = (out_ / "model").string();
        save_model(summary_.checkpoint_dir, config_.model, model_.params(), steps_done_,
                   place_.tp, place_.pp, model_.virtual_stages(), options_.tokenizer);
      }
      model_.release_all_params();
    }
    if (!place_.chief) return;
    if (!summary_.checkpoint_dir.empty()) save_tokenizer(summary_.checkpoint_dir);
    // This run's evaluations (before the earlier run's join the curve): the first and the last,
    // each with its step when they are not the first and the last step.
    std::string val = "no validation data";
    if (data_.val && !curve_.val.empty()) {
      const auto [first_step, first] = curve_.val.front();
      const auto [last_step, last] = curve_.val.back();
      if (last_step == first_step)
        val = fmt::format("val loss {:.4f} at step {} (not evaluated since)", first, first_step);
      else if (last_step != steps_done_)
        val = fmt::format("val loss {:.4f} -> {:.4f} (at step {})", first, last, last_step);
      else
        val = fmt::format("val loss {:.4f} -> {:.4f}", first, last);
    }
    if (options_.resume) add_earlier_steps(curve_, summary_.metrics_path, start_step_);
    write_loss_svg(summary_.plot_path, curve_);
    const std::string lr_plot = (out_ / "lr.svg").string();
    write_lr_svg(lr_plot, schedule_, tc_.steps,
                 fmt::format("learning rate: {} schedule, {} steps", name_of(schedule_.shape),
                             tc_.steps));
    // The tracked peak counts kintsugi's tensors (docs/metrics.md, "Memory categories"); on the
    // CPU the process also holds its code, the MPI library's and OpenBLAS's buffers and what
    // malloc keeps, which the resident-set peak includes.
    std::string rss;
    if (tc_.device == Device::cpu) {
      rusage usage{};
      if (getrusage(RUSAGE_SELF, &usage) == 0)
        rss = fmt::format(" (tensors; process peak RSS {}: also code, MPI and BLAS buffers, "
                          "freed memory malloc keeps)",
                          format_bytes(static_cast<std::size_t>(usage.ru_maxrss) * 1024));
    }
    fmt::print(log_,
               "{}: {} step{} in {} | loss {:.4f} -> {:.4f} | {} | "
               "{:.0f} tok/s, MFU {:.1f}% | peak memory {} per rank{}\n",
               summary_.stopped ? fmt::format("stopped by a signal at step {}", steps_done_)
                                : "done",
               steps_done_ - start_step_, steps_done_ - start_step_ == 1 ? "" : "s",
               format_duration(run_clock_.seconds()), summary_.first_loss, summary_.last_loss,
               val, summary_.tokens_per_s, 100 * summary_.mfu, format_bytes(memory_.peak_total()),
               rss);
    fmt::print(log_, "wrote {}, {} and {}{}{}{}\n", summary_.metrics_path, summary_.plot_path,
               lr_plot,
               summary_.checkpoint_dir.empty() ? "" : " and " + summary_.checkpoint_dir,
               options_.trace_path.empty() ? "" : " and " + options_.trace_path,
               tensorboard_ ? " and " + tensorboard_->path() : "");
  }

  const RunConfig config_;
  const TrainConfig& tc_;
  TrainInputs& data_;
  const TrainOptions& options_;
  std::ostream& log_;
  const Topology* topology_;
  const Place place_;
  MemoryTracker memory_;
  std::unique_ptr<Backend> backend_;
  Tracer tracer_;
  StageModel model_;
  const int micro_batches_;              // per data-parallel rank, at the full global batch
  const std::int64_t tokens_per_step_;  // at the full global batch
  const LrSchedule schedule_;
  const BatchLrRule lr_rule_;
  BatchSchedule batches_;  // every step's global batch (a ramp-up's); set again on resume
  const fs::path out_;
  double flops_per_step_ = 0, hardware_flops_per_step_ = 0;
  std::optional<GemmRate> peak_;  // rank 0
  double core_share_ = 1.0, peak_total_gflops_ = 0;  // rank 0: the job's MFU peak
  bool peak_warned_ = false;  // rank 0: said once that MFU exceeds 100%
  std::optional<MetricsWriter> metrics_;
  std::optional<TensorBoardWriter> tensorboard_;  // rank 0, with metrics.tensorboard_dir
  std::optional<JobEnergy> energy_;  // measured joules per step, where a counter is readable
  TrainSummary summary_;
  LossCurve curve_;
  std::int64_t start_step_ = 0, steps_done_ = 0;
  std::vector<std::string> resume_notes_;  // what the log says about a resumed ramp-up
  std::vector<std::int64_t> dataset_tokens_;  // training tokens drawn from each dataset
  std::int64_t saved_step_ = -1;
  std::optional<double> last_val_loss_;  // of step steps_done_, when it was evaluated
  double best_val_ = 0;  // the lowest sound validation loss of this run
  std::string write_error_;  // rank 0: metrics.jsonl could not be written
  int stop_checks_ = 0;  // micro-batches of the current step or evaluation that every rank runs
  double load_seconds_ = 0, timed_seconds_ = 0, timed_tokens_ = 0;
  Stopwatch run_clock_;
};

}  // namespace

TrainInputs open_inputs(const RunConfig& config) {
  return {open_train_data(config), open_val_data(config)};
}

TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log) {
  return train(config, open_inputs(config), options, log);
}

TrainSummary train(const RunConfig& config, TrainInputs data, const TrainOptions& options,
                   std::ostream& log, const Topology* topology) {
  return TrainingRun(config, data, options, log, topology).run();
}

}  // namespace kintsugi
