// TrainingRun's optimizer step (training_run.hpp): this rank's share of the step's global
// batch in micro-batches, the update, and what the step measured (loss, rates, bytes sent,
// energy, tokens per dataset); on the last step of a traced run, the Chrome trace.
#include <fmt/format.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/comm_volume.hpp"
#include "kintsugi/train/training_run.hpp"

namespace kintsugi {

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
    // Each rank's coordinates (cp where sequences are split).
    auto name = [&](int r) {
      const RankCoords c = place.topology->map().coords(r);
      return fmt::format("rank {} (tp {}, dp {}, pp {}{})", r, c.tp, c.dp, c.pp,
                         place.cp_size > 1 ? fmt::format(", cp {}", c.cp) : "");
    };
    names[0] = name(0);
    for (int r = 1; r < world.size(); ++r) {
      ranks.push_back(deserialize(all[static_cast<std::size_t>(r)]));
      names.push_back(name(r));
    }
  }
  write_chrome_trace(path, ranks, names);
}

}  // namespace

void TrainingRun::sleep_ms(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// The fault hook's delay of every training micro-batch of step `step` (0-based; the hook
// counts from 1, as the log does).
int TrainingRun::train_delay_ms(std::int64_t step) const {
  const auto& slow = ctx_.options.faults.slow_micro_batches;
  return slow && !slow->evaluation && step + 1 >= slow->from_step ? slow->ms : 0;
}

// Adds the tokens of step `step`'s global batch to the dataset each sequence came from.
void TrainingRun::count_dataset_tokens(std::int64_t step) {
  std::vector<std::int64_t>& counts = progress_.dataset_tokens;
  counts.resize(ctx_.data.train.num_sources());
  for (std::int64_t i = 0; i < ctx_.batches.batch(step); ++i)
    counts[ctx_.data.train.source_of(step, i)] += ctx_.config.model.seq_len;
}

// One optimizer step over this rank's micro-batches, with what it measured; none when a stop
// signal ended it before the optimizer ran.
std::optional<StepMetrics> TrainingRun::train_step(std::int64_t step) {
  const TrainConfig& tc = ctx_.tc;
  const Place& place = ctx_.place;
  StageModel& model = ctx_.model;
  const bool traced = !ctx_.options.trace_path.empty() && step + 1 == tc.steps;
  if (traced && ctx_.topology) ctx_.topology->world().barrier();  // one time origin for all ranks
  ctx_.tracer.start(traced, ctx_.backend->timeline());
  const auto bytes_before = bytes_sent(ctx_.topology);
  // The step's global batch (a ramp-up's, train/batch_rampup.hpp) split as the full one is.
  const std::int64_t batch = ctx_.batches.batch(step), rank_batch = batch / place.dp_size;
  const int micro_batches = static_cast<int>(rank_batch / tc.micro_batch);
  const std::int64_t step_tokens = batch * ctx_.config.model.seq_len;
  const std::int64_t first_sequence = place.dp_rank * rank_batch, mb = tc.micro_batch;
  // 3D tensor parallelism: z rank k runs sequences [k mb / z, (k + 1) mb / z) of each
  // micro-batch (docs/parallelism.md).
  const std::int64_t share = mb / place.depth_size, share_begin = place.depth_rank * share;
  energy_->begin();  // the first step's: the first span of the job's energy starts here
  Stopwatch clock;
  const double lr = ctx_.schedule.at(step) * batch_lr_factor(ctx_.lr_rule, batch, tc.global_batch);
  progress_.stop_checks = micro_batches;
  const int delay = train_delay_ms(step);
  const auto result = model.train_step(
      [&](int k, std::int32_t* tokens, std::int32_t* targets) {
        ctx_.data.train.sample(step, first_sequence + k * mb + share_begin, share, tokens,
                               targets);
        sleep_ms(delay);
      },
      micro_batches, 1.0 / static_cast<double>(step_tokens), lr, tc.grad_clip);
  if (model.interrupted()) return std::nullopt;
  const double seconds = clock.seconds();
  // Collective, like the loss's sum.
  const std::optional<EnergySpan> energy = energy_->end(step_tokens);

  StepMetrics m;
  m.step = step + 1;
  m.loss = result.loss_sum / static_cast<double>(step_tokens);
  m.global_batch = batch;
  m.lr = lr;
  m.grad_norm = result.grad_norm;
  if (model.loss_scaler().enabled()) {
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
  if (!result.moe.empty()) {
    // Per MoE layer [aux_sum, z_sum, micro_batches, dropped, rows per expert...]
    // (StageModel::StepResult).
    const ModelConfig& mc = ctx_.config.model;
    const std::size_t width = 4 + static_cast<std::size_t>(mc.moe.experts);
    const auto layers = static_cast<std::size_t>(mc.moe_blocks());
    double aux = 0, z = 0, dropped = 0, routed = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      const double* row = result.moe.data() + l * width;
      const double mbs = std::max(row[2], 1.0);
      aux += row[0] / mbs;
      z += row[1] / mbs;
      dropped += row[3];
      double most = 0, sum = 0;
      for (std::size_t e = 0; e + 4 < width; ++e) {
        most = std::max(most, row[4 + e]);
        sum += row[4 + e];
      }
      routed += sum;
      m.moe_load.emplace_back(most, sum / static_cast<double>(mc.moe.experts));
    }
    m.moe_aux_loss = aux / static_cast<double>(layers);
    m.moe_z_loss = z / static_cast<double>(layers);
    if (mc.moe.capacity_factor > 0) m.moe_dropped_fraction = routed > 0 ? dropped / routed : 0.0;
    if (mc.moe.bias_update_rate > 0) m.moe_router_bias_max_abs = model.moe_router_bias_max_abs();
    // Expert parallelism: this rank's all-to-all bytes follow from its routing
    // (plan/comm_volume.hpp, expert_all_to_all_bytes).
    if (ctx_.config.parallel.ep > 1)
      m.comm_bytes_theory["ep.all_to_all"] = expert_all_to_all_bytes(
          mc, ctx_.config.parallel, static_cast<double>(result.moe_forwards),
          static_cast<double>(result.moe_rows_sent),
          static_cast<double>(result.moe_rows_received),
          static_cast<std::int64_t>(size_of(compute_dtype(tc.precision))),
          tc.recompute == Recompute::full);
  }
  m.step_seconds = seconds;
  // FLOPs scale with the step's tokens (a ramp-up's smaller batches do less work).
  const double of_full = static_cast<double>(batch) / static_cast<double>(tc.global_batch);
  throughput_.rate_step(m, step_tokens, of_full, seconds, ctx_.config, ctx_.log);
  m.comm_bytes = difference(bytes_sent(ctx_.topology), bytes_before);
  if (energy) {
    m.energy_j = energy->joules;
    m.energy_seconds = energy->seconds;
    m.joules_per_token = energy->joules / static_cast<double>(energy->tokens);
  }
  count_dataset_tokens(step);
  for (std::size_t k = 0; k < progress_.dataset_tokens.size(); ++k)
    m.dataset_tokens[ctx_.data.train.tokens(k).path().string()] += progress_.dataset_tokens[k];
  if (place.pp) m.bubble = 1.0 - model.compute_seconds() / seconds;
  if (traced) {
    ctx_.tracer.resolve();  // the GPU's spans, once it has run them
    write_trace(ctx_.options.trace_path, ctx_.tracer, place);
  }
  return m;
}

}  // namespace kintsugi
