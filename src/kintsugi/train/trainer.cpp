#include "kintsugi/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/core/trace.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/data/batch_sampler.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/optim/lr_schedule.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "kintsugi/plan/comm_volume.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/plan/memory.hpp"
#include "kintsugi/train/loss_plot.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/step_metrics.hpp"

namespace kintsugi {

namespace {

data::BatchSampler open_sampler(const std::string& path, const char* key,
                                const RunConfig& config) {
  auto file = data::TokenFile::open(path);
  if (file.vocab_size() > config.model.vocab_size)
    fail("{} was tokenized with a vocabulary of {} but model.vocab_size is {}: set {} or use a "
         "matching token file",
         path, file.vocab_size(), config.model.vocab_size, key);
  return data::BatchSampler(std::move(file), config.model.seq_len,
                            static_cast<std::uint64_t>(config.train.seed));
}

void snapshot_memory(const MemoryTracker& memory, StepMetrics& m) {
  for (int k = 0; k < kMemoryKinds; ++k) {
    m.memory_current[k] = memory.current(static_cast<MemoryKind>(k));
    m.memory_peak[k] = memory.peak(static_cast<MemoryKind>(k));
  }
}

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

// The numerics and memory options, e.g. "bf16 (f32 gradients), recompute selective".
std::string describe_numerics(const RunConfig& c) {
  const auto& t = c.train;
  std::string text = t.precision == "fp32" ? "fp32"
                                           : fmt::format("{} with f32 master weights, {} gradients",
                                                         t.precision,
                                                         t.grad_precision == "param" ? t.precision
                                                                                     : "f32");
  if (t.precision == "fp16") text += fmt::format(", loss scale {:g} dynamic", t.loss_scale);
  if (t.recompute != "none") text += fmt::format(", recompute {}", t.recompute);
  return text;
}

std::string describe(const RunConfig& c, const Place& place, const StageModel& model) {
  if (!place.topology) return "1 rank (serial)";
  const auto& p = c.parallel;
  std::string text = fmt::format("{} ranks = tp {} x dp {} x pp {}{} (order {})", place.world,
                                 p.tp, p.dp, p.pp,
                                 p.sequence_parallel && p.tp > 1 ? ", sequence parallel" : "",
                                 p.order);
  if (p.pp > 1)
    text += fmt::format(", schedule {}{}, blocks per chunk [{}]", p.schedule,
                        p.virtual_stages > 1 ? fmt::format(" x {} virtual", p.virtual_stages) : "",
                        fmt::join(model.partition().num_layers, " "));
  if (p.zero > 0)
    text += p.hsdp > 0 ? fmt::format(", ZeRO-{} sharded over {} ranks x {} replicas", p.zero,
                                     p.hsdp, p.dp / p.hsdp)
                       : fmt::format(", ZeRO-{} over {} ranks", p.zero, p.dp);
  return text;
}

// Bytes rank 0 should send per step, per "group.operation" (plan/comm_volume.hpp).
std::map<std::string, double> expected_comm_bytes(const RunConfig& c, const Place& place,
                                                  const StageModel& model,
                                                  std::int64_t micro_batches) {
  StepShape shape{.micro_batch = c.train.micro_batch,
                  .seq = c.model.seq_len,
                  .micro_batches = micro_batches,
                  .element_bytes = 4,
                  .blocks = 0,
                  .embedding = false,
                  .head = false};
  const int chunks = place.pp_size * model.virtual_stages();
  const auto& par = c.parallel;
  shape.zero = static_cast<int>(par.zero);
  shape.recompute_full = c.train.recompute == "full";
  shape.shards = par.zero > 0 ? (par.hsdp > 0 ? par.hsdp : par.dp) : 1;
  shape.replicas = par.zero > 0 && par.hsdp > 0 ? par.dp / par.hsdp : 1;
  for (const auto& chunk : model.chunks()) {
    const ParamStore& p = chunk->params();
    shape.grad_elements += p.numel();
    shape.param_element_bytes = static_cast<std::int64_t>(size_of(p.param_dtype()));
    shape.activation_element_bytes = shape.param_element_bytes;
    shape.element_bytes = static_cast<std::int64_t>(size_of(p.grad_dtype()));
    for (int u = 0; u < p.units(); ++u) {
      const bool block = p.unit(u).name.rfind("blocks.", 0) == 0;
      (block ? shape.gathered_twice_elements : shape.gathered_once_elements) += p.unit(u).size();
    }
    shape.blocks += chunk->spec().num_layers;
    shape.embedding |= chunk->spec().embedding;
    shape.head |= chunk->spec().head;
    // Outputs go forward unless the chunk ends the model, input gradients back unless it
    // starts it.
    shape.pipeline_sends += (chunk->spec().head ? 0 : 1) + (chunk->spec().embedding ? 0 : 1);
    for (int i = 0; i < p.size(); ++i) {
      const auto& e = p.entry(i);
      if (e.spec.sequence_parallel_grad) shape.sp_grad_elements += e.local_shape.numel();
      if (chunks > 1 && c.model.tied_embeddings() && e.spec.name == "embedding.token.weight")
        shape.tied_embedding_elements += e.local_shape.numel();
    }
  }
  return step_comm_bytes(c.model,
                         {.tp = c.parallel.tp, .dp = c.parallel.dp,
                          .sequence_parallel = c.parallel.sequence_parallel},
                         shape);
}

// Bytes rank 0 should hold per memory category (plan/memory.hpp).
nlohmann::json expected_memory(const RunConfig& c, const Place& place, const StageModel& model) {
  const auto& par = c.parallel;
  const std::int64_t shards = par.zero > 0 ? (par.hsdp > 0 ? par.hsdp : par.dp) : 1;
  StateBytes state;
  double activations = 0;
  for (const auto& chunk : model.chunks()) {
    const ParamStore& p = chunk->params();
    const DType pt = p.param_dtype();
    const StateBytes s = model_state_bytes(
        static_cast<double>(p.numel()), static_cast<int>(par.zero), shards,
        static_cast<std::int64_t>(size_of(pt)), static_cast<std::int64_t>(size_of(p.grad_dtype())),
        pt == DType::bf16 || pt == DType::f16);
    state.parameters += s.parameters;
    state.gradients += s.gradients;
    state.optimizer_state += s.optimizer_state;
    const ActivationShape shape{.micro_batch = c.train.micro_batch,
                                .seq = c.model.seq_len,
                                .tp = par.tp,
                                .sequence_parallel = par.sequence_parallel,
                                .recompute = parse_recompute(c.train.recompute),
                                .element_bytes = static_cast<std::int64_t>(size_of(pt)),
                                .statistic_bytes = pt == DType::f64 ? 8 : 4};
    activations += model.slots() * chunk_activation_bytes(c.model, shape, chunk->spec().num_layers,
                                                          chunk->spec().head,
                                                          chunk->spec().embedding);
  }
  (void)place;
  return {{"parameters", state.parameters},
          {"gradients", state.gradients},
          {"optimizer_state", state.optimizer_state},
          {"activations", activations}};
}

// What the run is, for people and programs: the resolved config, the layout, and the expected
// communication (plan/comm_volume.hpp) and memory (plan/memory.hpp) of rank 0.
void write_run_description(const std::filesystem::path& path, const RunConfig& c,
                           const Place& place, const StageModel& model,
                           std::int64_t micro_batches) {
  nlohmann::json j = {
      {"comm_bytes_per_step_theory", expected_comm_bytes(c, place, model, micro_batches)},
      {"memory_bytes_theory", expected_memory(c, place, model)},
      {"model", to_json(c.model)},
      {"world", place.world},
      {"parallel",
       {{"tp", c.parallel.tp},
        {"dp", c.parallel.dp},
        {"pp", c.parallel.pp},
        {"schedule", c.parallel.schedule},
        {"virtual_stages", c.parallel.virtual_stages},
        {"layers_per_chunk", model.partition().num_layers},
        {"sequence_parallel", c.parallel.sequence_parallel},
        {"order", c.parallel.order}}},
      {"global_batch", c.train.global_batch},
      {"micro_batch", c.train.micro_batch},
      {"micro_batches_per_rank", micro_batches},
      {"seq", c.model.seq_len},
      {"parameters", parameter_count(c.model)},
      {"model_flops_per_token", model_flops_per_token(c.model, c.model.seq_len)}};
  std::ofstream(path) << j.dump(2) << "\n";
}

// Gathers every rank's events of the traced step to rank 0, which writes the trace.
void write_trace(const std::string& path, const Tracer& tracer, const Place& place) {
  const std::string mine = serialize(tracer.events());
  std::vector<std::vector<TraceEvent>> ranks = {tracer.events()};
  std::vector<std::string> names = {"rank 0"};
  if (place.topology) {
    Communicator& world = place.topology->world();
    std::vector<double> lengths(world.size());
    double length = static_cast<double>(mine.size());
    world.all_gather(Tensor{&length, DType::f64, Shape{1}},
                     Tensor{lengths.data(), DType::f64, Shape{world.size()}});
    constexpr int kTraceTag = 1 << 20;
    if (world.rank() != 0) {
      world.send_async(Tensor{const_cast<char*>(mine.data()), DType::u8,
                              Shape{static_cast<std::int64_t>(mine.size())}},
                       0, kTraceTag)
          .wait();
      return;
    }
    for (int r = 1; r < world.size(); ++r) {
      std::string text(static_cast<std::size_t>(lengths[r]), '\0');
      world.recv_async(Tensor{text.data(), DType::u8, Shape{static_cast<std::int64_t>(text.size())}},
                       r, kTraceTag)
          .wait();
      ranks.push_back(deserialize(text));
      const RankCoords c = place.topology->map().coords(r);
      names.push_back(fmt::format("rank {} (tp {}, dp {}, pp {})", r, c.tp, c.dp, c.pp));
    }
    const RankCoords c0 = place.topology->map().coords(0);
    names[0] = fmt::format("rank 0 (tp {}, dp {}, pp {})", c0.tp, c0.dp, c0.pp);
  }
  write_chrome_trace(path, ranks, names);
}

// KINTSUGI_TEST_KILL_RANK="RANK:STEP" makes that rank kill itself at that step: the fault
// tests use it to check that a dead rank ends the job instead of hanging it.
std::optional<std::pair<int, std::int64_t>> test_kill_point() {
  const char* v = std::getenv("KINTSUGI_TEST_KILL_RANK");
  int rank = 0;
  long long step = 0;
  if (v && std::sscanf(v, "%d:%lld", &rank, &step) == 2) return std::make_pair(rank, step);
  return std::nullopt;
}

// This rank's weights and optimizer state, as the checkpoint code sees them.
RankState rank_state(StageModel& model, const Place& place) {
  RankState r;
  r.params = model.params();
  for (std::size_t c = 0; c < model.chunks().size(); ++c) r.states.push_back(&model.state(static_cast<int>(c)));
  r.tp_rank = place.tp.rank();
  r.world = place.topology ? &place.topology->world() : nullptr;
  return r;
}

// The layout a checkpoint was written with (for people reading its manifest).
nlohmann::json describe_layout(const RunConfig& c, const Place& place) {
  const auto& p = c.parallel;
  return {{"world", place.world}, {"tp", p.tp},
          {"pp", p.pp},           {"dp", p.dp},
          {"zero", p.zero},       {"hsdp", p.hsdp},
          {"schedule", p.schedule}, {"virtual_stages", p.virtual_stages},
          {"sequence_parallel", p.sequence_parallel}, {"precision", c.train.precision}};
}

// Whether any rank of the job received SIGTERM/SIGINT: every rank must take the same decision
// at the same step boundary, or the ones that go on would wait for the ones that stopped.
bool job_asked_to_stop(const Place& place) {
  double flag = stop_requested() ? 1.0 : 0.0;
  if (place.topology) place.topology->world().all_reduce(Tensor{&flag, DType::f64, Shape{1}});
  return flag > 0;
}

}  // namespace

TrainInputs open_inputs(const RunConfig& config) {
  return {open_sampler(config.data.train, "data.train", config),
          open_sampler(config.data.val, "data.val", config)};
}

TrainSummary train(const RunConfig& config, const TrainOptions& options, std::ostream& log) {
  return train(config, open_inputs(config), options, log);
}

TrainSummary train(const RunConfig& config, TrainInputs data, const TrainOptions& options,
                   std::ostream& log, const Topology* topology) {
  const TrainConfig& tc = config.train;
  const ModelConfig& mc = config.model;
  const Place place(topology, config.parallel.sequence_parallel);
  const std::int64_t T = mc.seq_len, mb = tc.micro_batch;
  const std::int64_t rank_batch = tc.global_batch / place.dp_size;  // sequences on this rank
  const int micro_batches = static_cast<int>(rank_batch / mb);
  const std::int64_t first_sequence = place.dp_rank * rank_batch;
  const std::int64_t tokens_per_step = tc.global_batch * T;
  const data::BatchSampler& train_data = data.train;
  const data::BatchSampler& val_data = data.val;

  MemoryTracker memory;
  auto backend = make_backend(tc.device, memory);
  std::optional<GemmRate> peak;
  if (place.chief)
    peak = config.metrics.peak_gflops > 0
               ? GemmRate{config.metrics.peak_gflops, compute_threads(), 0, "",
                          peak_dtype(tc.precision), "metrics.peak_gflops from the config"}
               : local_gemm_rate(*backend, peak_dtype(tc.precision));

  Tracer tracer;
  StageModel model(*backend, config, place, tracer);
  install_stop_handlers();
  std::int64_t start_step = 0;
  double load_seconds = 0;
  if (options.resume) {
    const CheckpointInfo& ckpt = *options.resume;
    Stopwatch load_clock;
    load_train_checkpoint(ckpt, rank_state(model, place));
    load_seconds = load_clock.seconds();
    // The loss scale carries over between fp16 runs; another precision starts its own.
    if (model.loss_scaler().enabled() && ckpt.manifest.at("layout").value("precision", "") == "fp16")
      model.loss_scaler().restore(ckpt.progress.loss_scaler);
    start_step = ckpt.progress.step;
    KINTSUGI_ASSERT(start_step <= tc.steps);  // `kintsugi train` refuses such a checkpoint
  } else if (options.init_weights) {
    // Shapes are checked against this rank's parameters, before any is written; the ranks
    // agree on the verdict so that one of them reports a mismatch.
    std::string error;
    try {
      set_weights(*options.init_weights, rank_state(model, place), options.init_from);
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_error(topology ? &topology->world() : nullptr, error);
  }
  const LrSchedule schedule{tc.lr, tc.min_lr, tc.warmup_steps, tc.decay_steps};
  const double flops_per_step = model_flops_per_token(mc, T) * static_cast<double>(tokens_per_step);
  // Hardware FLOPs count the forward work recomputation repeats (HFU; MFU does not).
  const double hardware_flops_per_step =
      hardware_flops_per_token(mc, T, tc.recompute == "selective", tc.recompute == "full") *
      static_cast<double>(tokens_per_step);

  namespace fs = std::filesystem;
  const fs::path out = options.out_dir;
  TrainSummary summary;
  summary.metrics_path =
      options.metrics_path.empty() ? (out / "metrics.jsonl").string() : options.metrics_path;
  summary.plot_path = (out / "loss.svg").string();
  std::optional<MetricsWriter> metrics;
  if (place.chief) {
    fs::create_directories(out);
    metrics.emplace(summary.metrics_path, options.resume ? start_step : -1);
    fmt::print(log,
               "kintsugi train | {} | model {} ({} layers, d {}, {} heads, {:.2f}M parameters) | "
               "{} threads per rank, {} backend | {}\n",
               config.source, mc.name, mc.n_layer, mc.d_model, mc.n_head,
               parameter_count(mc) / 1e6, compute_threads(), backend->name(),
               describe_numerics(config));
    fmt::print(log,
               "layout: {} | global batch {} x {} tokens = {} tokens/step, {} micro-batches of {} "
               "per data-parallel rank | {:.3f} GFLOP/step (model FLOPs)\n",
               describe(config, place, model), tc.global_batch, T, tokens_per_step,
               micro_batches, mb, flops_per_step / 1e9);
    fmt::print(log, "data: train {} ({} tokens), val {} ({} tokens)\n", config.data.train,
               train_data.tokens().size(), config.data.val, val_data.tokens().size());
    fmt::print(log, "MFU peak: {:.1f} GFLOP/s per rank x {} ranks, {}\n", peak->gflops,
               place.world, peak->source);
    const auto comm = expected_comm_bytes(config, place, model, micro_batches);
    if (!comm.empty()) {
      std::string text;
      for (const auto& [key, bytes] : comm)
        text += fmt::format(" {} {}", key, format_bytes(static_cast<std::size_t>(bytes)));
      fmt::print(log, "communication per step of rank 0 (ring algorithms, theory):{}\n", text);
    }
    write_run_description(out / "run.json", config, place, model, micro_batches);
    if (options.init_weights && !options.resume)
      fmt::print(log, "initial weights from {}\n", options.init_from);
    if (options.resume)
      fmt::print(log, "resumed from {} at step {} (saved by {} ranks: tp {} x pp {} x dp {}, ZeRO-{}); "
                      "loaded in {:.2f} s\n",
                 options.resume->dir.string(), start_step,
                 options.resume->manifest.at("layout").value("world", 1),
                 options.resume->manifest.at("layout").value("tp", 1),
                 options.resume->manifest.at("layout").value("pp", 1),
                 options.resume->manifest.at("layout").value("dp", 1),
                 options.resume->manifest.at("layout").value("zero", 0), load_seconds);
  }

  // Evaluation: eval_batches micro-batches of evenly spread windows, shared out round-robin
  // across the data-parallel ranks.
  const std::int64_t eval_windows = tc.eval_batches * mb;
  const int eval_micro_batches =
      static_cast<int>((tc.eval_batches - place.dp_rank + place.dp_size - 1) / place.dp_size);
  const int eval_lockstep = static_cast<int>((tc.eval_batches + place.dp_size - 1) / place.dp_size);
  auto evaluate = [&] {
    const double sum = model.evaluate(
        [&](int k, std::int32_t* tokens, std::int32_t* targets) {
          // Forwards past this rank's share (ZeRO-3 lockstep) read window 0; their loss is dropped.
          const std::int64_t b =
              k < eval_micro_batches ? place.dp_rank + static_cast<std::int64_t>(k) * place.dp_size : 0;
          for (std::int64_t i = 0; i < mb; ++i)
            val_data.eval_window(b * mb + i, eval_windows, tokens + i * T, targets + i * T);
        },
        std::max(0, eval_micro_batches), eval_lockstep);
    return sum / static_cast<double>(eval_windows * T);
  };

  LossCurve curve{.title = fmt::format("{} on {}", mc.name, config.data.train)};
  const double initial_val = evaluate();
  curve.val.emplace_back(start_step, initial_val);
  summary.first_val_loss = summary.last_val_loss = initial_val;
  if (place.chief) fmt::print(log, "step {} | val loss {:.4f}\n", start_step, initial_val);

  double timed_seconds = 0;
  Stopwatch run_clock;
  const auto kill_at = test_kill_point();
  const fs::path checkpoints = out / "checkpoints";
  std::int64_t steps_done = start_step;
  for (std::int64_t step = start_step; step < tc.steps; ++step) {
    if (kill_at && topology && topology->world().rank() == kill_at->first && step == kill_at->second)
      std::raise(SIGKILL);  // a rank dying mid-run (tests: the job must end, not hang)
    const bool traced = !options.trace_path.empty() && step + 1 == tc.steps;
    if (traced && topology) topology->world().barrier();  // one time origin for all ranks
    tracer.start(traced);
    const auto bytes_before = bytes_sent(topology);
    Stopwatch step_clock;
    const double lr = schedule.at(step);
    const auto result = model.train_step(
        [&](int k, std::int32_t* tokens, std::int32_t* targets) {
          train_data.sample(step, first_sequence + k * mb, mb, tokens, targets);
        },
        micro_batches, 1.0 / static_cast<double>(tokens_per_step), lr, tc.grad_clip);
    const double seconds = step_clock.seconds();

    StepMetrics m;
    m.step = step + 1;
    m.loss = result.loss_sum / static_cast<double>(tokens_per_step);
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
    m.step_seconds = seconds;
    m.tokens_per_s = tokens_per_step / seconds;
    m.model_tflops = flops_per_step / seconds / 1e12;
    if (peak) {
      m.mfu = flops_per_step / seconds / (peak->gflops * 1e9 * place.world);
      m.hfu = hardware_flops_per_step / seconds / (peak->gflops * 1e9 * place.world);
    }
    m.comm_bytes = difference(bytes_sent(topology), bytes_before);
    if (place.pp) m.bubble = 1.0 - model.compute_seconds() / seconds;
    if (!std::isfinite(m.loss))
      fail("the loss became {} at step {}: lower train.lr or raise train.warmup_steps",
           m.loss, m.step);
    if (traced) write_trace(options.trace_path, tracer, place);
    const bool last = step + 1 == tc.steps;
    if (last || (tc.eval_every > 0 && m.step % tc.eval_every == 0)) {
      m.val_loss = evaluate();
      curve.val.emplace_back(m.step, *m.val_loss);
      summary.last_val_loss = *m.val_loss;
    }
    snapshot_memory(memory, m);
    m.activations_in_flight = model.peak_in_flight();
    curve.train.emplace_back(m.step, m.loss);
    if (step == start_step) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (step > start_step || tc.steps - start_step == 1) {
      timed_seconds += seconds;
      summary.tokens_per_s =
          tokens_per_step * (tc.steps - start_step == 1 ? 1 : step - start_step) / timed_seconds;
    }
    if (place.chief) {
      metrics->write(m);
      if (m.step % tc.log_every == 0 || last || m.val_loss) {
        const double eta = run_clock.seconds() / (m.step - start_step) * (tc.steps - m.step);
        fmt::print(log, "{}\n", format_step_line(m, tc.steps, eta));
        log.flush();
      }
    }
    steps_done = m.step;
    // Step boundary: a checkpoint when due or when the job is asked to stop.
    const bool stop = job_asked_to_stop(place);
    if (stop || (tc.save_every > 0 && (m.step % tc.save_every == 0 || last))) {
      const TrainProgress progress{.step = m.step,
                                   .optimizer_steps = model.state(0).optimizer().steps_taken(),
                                   .loss_scaler = model.loss_scaler().state(),
                                   .seed = tc.seed};
      Stopwatch save_clock;
      summary.last_train_checkpoint =
          save_train_checkpoint(checkpoints, mc, describe_layout(config, place), progress,
                                rank_state(model, place), tc.keep_checkpoints)
              .string();
      if (place.chief)
        fmt::print(log, "saved checkpoint {} in {:.2f} s\n", summary.last_train_checkpoint,
                   save_clock.seconds());
    }
    if (stop) {
      summary.stopped = true;
      if (place.chief)
        fmt::print(log, "stopped by a signal after step {}: continue with --resume auto (or "
                        "--resume {})\n", m.step, summary.last_train_checkpoint);
      break;
    }
  }
  summary.steps = steps_done;
  if (peak)
    summary.mfu = summary.tokens_per_s / tokens_per_step * flops_per_step /
                  (peak->gflops * 1e9 * place.world);
  // The whole model is gathered to rank 0 from the stages of data-parallel replica 0.
  if (tc.save_checkpoint && !summary.stopped) {
    // ZeRO-3 gathers weights from the whole data-parallel group, so every rank takes part.
    model.acquire_all_params();
    if (place.dp_rank == 0) {
      summary.checkpoint_dir = (out / "model").string();
      save_model(summary.checkpoint_dir, mc, model.params(), steps_done, place.tp, place.pp,
                 model.virtual_stages());
    }
    model.release_all_params();
  }
  if (!place.chief) return summary;
  write_loss_svg(summary.plot_path, curve);
  fmt::print(log,
             "done: {} steps in {} | loss {:.4f} -> {:.4f} | val loss {:.4f} -> {:.4f} | "
             "{:.0f} tok/s, MFU {:.1f}% | peak memory {} per rank\n",
             steps_done - start_step, format_duration(run_clock.seconds()), summary.first_loss,
             summary.last_loss, summary.first_val_loss, summary.last_val_loss,
             summary.tokens_per_s, 100 * summary.mfu, format_bytes(memory.peak_total()));
  fmt::print(log, "wrote {} and {}{}{}\n", summary.metrics_path, summary.plot_path,
             summary.checkpoint_dir.empty() ? "" : " and " + summary.checkpoint_dir,
             options.trace_path.empty() ? "" : " and " + options.trace_path);
  return summary;
}

}  // namespace kintsugi
