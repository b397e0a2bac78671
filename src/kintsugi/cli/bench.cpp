// `kintsugi bench`: measure this machine (GEMM rate) and the engine (training steps).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/comm/collective_timing.hpp"
#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/core/memory.hpp"
#include "kintsugi/core/switches.hpp"
#include "kintsugi/plan/local_cluster.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/gemm_rate.hpp"
#include "kintsugi/plan/op_roofline.hpp"
#include "kintsugi/train/step_benchmark.hpp"

namespace kintsugi::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean_seconds(const std::vector<double>& steps) {
  double total = 0;
  for (double s : steps) total += s;
  return total / static_cast<double>(steps.size());
}

// Ops sorted by time, per profiled step.
std::vector<std::pair<std::string, OpProfile>> by_time(const std::map<std::string, OpProfile>& m) {
  std::vector<std::pair<std::string, OpProfile>> ops(m.begin(), m.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  return ops;
}

std::string rate(double amount, double seconds, double unit) {
  return amount > 0 && seconds > 0 ? fmt::format("{:.1f}", amount / seconds / unit) : "";
}

// How the ops were timed, what that cost, and the roofline's two ceilings.
void print_profile_header(const StepBenchmarkResult& r, const RooflineCeilings& c, int steps) {
  const double profiled = median(r.profiled_step_seconds), plain = r.median_seconds;
  const std::int64_t marks = r.profile_marks / steps;
  if (r.profile_events)
    fmt::print("\nProfile: each op between two events on the device's stream, no synchronization "
               "between ops ({} marks per step)\n",
               marks);
  else
    fmt::print("\nProfile: host clock, synchronizing after each op (ops timed one at a time, "
               "without the overlap of a normal run)\n");
  fmt::print("Profiled steps {:.2f} ms (median), unprofiled steps between them {:.2f} ms: the "
             "profile adds {:+.2f} ms per step{}\n",
             1e3 * profiled, 1e3 * plain, 1e3 * (profiled - plain),
             marks > 0 ? fmt::format(" ({:+.2f} us per mark)", 1e6 * (profiled - plain) / marks)
                       : "");
  fmt::print("Ceilings: GEMM {:.1f} GFLOP/s ({}); memory {:.1f} GB/s (device-to-device copy of "
             "{} MiB, bytes read + written)\n",
             c.gemm_gflops, c.gemm_source, c.copy_gbs, c.copy_bytes >> 20);
}

// Per op kind, sorted by time; the remainder is time outside backend ops.
void print_profile_kinds(const StepBenchmarkResult& r, int steps) {
  const double total = mean_seconds(r.profiled_step_seconds) * steps;
  fmt::print("\n{:<24} {:>10} {:>10} {:>8} {:>10}\n", "op", "calls/step", "ms/step", "share",
             "GFLOP/s");
  double covered = 0;
  for (const auto& [name, p] : by_time(r.ops)) {
    covered += p.seconds;
    fmt::print("{:<24} {:>10.0f} {:>10.2f} {:>7.1f}% {:>10}\n", name, double(p.calls) / steps,
               1e3 * p.seconds / steps, 100 * p.seconds / total, rate(p.flops, p.seconds, 1e9));
  }
  fmt::print("{:<24} {:>10} {:>10.2f} {:>7.1f}%\n", "(outside ops)", "",
             1e3 * (total - covered) / steps, 100 * (total - covered) / total);
}

// Per op and shape, sorted by time: calls and GFLOP per step, rates (GB/s of the least bytes
// the op must move), and its roofline floor with the time's ratio to it (op_roofline.hpp).
void print_profile_shapes(const StepBenchmarkResult& r, const RooflineCeilings& c, int steps) {
  const double total = mean_seconds(r.profiled_step_seconds) * steps;
  fmt::print("\n{:<44} {:>6} {:>9} {:>7} {:>9} {:>10} {:>8} {:>9} {:>7}\n", "op and shape",
             "calls", "ms/step", "share", "GFLOP", "GFLOP/s", "GB/s", "floor ms", "x floor");
  OpProfile sum;
  double floor_sum = 0;
  for (const auto& [name, p] : by_time(r.op_shapes)) {
    const double floor = floor_seconds(p, c);
    sum.calls += p.calls;
    sum.seconds += p.seconds;
    floor_sum += floor;
    fmt::print("{:<44} {:>6.0f} {:>9.3f} {:>6.1f}% {:>9} {:>10} {:>8} {:>9.3f} {:>7}\n", name,
               double(p.calls) / steps, 1e3 * p.seconds / steps, 100 * p.seconds / total,
               p.flops > 0 ? fmt::format("{:.1f}", p.flops / steps / 1e9) : "",
               rate(p.flops, p.seconds, 1e9), rate(p.bytes, p.seconds, 1e9),
               1e3 * floor / steps, floor > 0 ? fmt::format("{:.1f}", p.seconds / floor) : "");
  }
  fmt::print("{:<44} {:>6.0f} {:>9.3f} {:>6.1f}% {:>9} {:>10} {:>8} {:>9.3f} {:>7}\n",
             "total (ops)", double(sum.calls) / steps, 1e3 * sum.seconds / steps,
             100 * sum.seconds / total, "", "", "", 1e3 * floor_sum / steps,
             floor_sum > 0 ? fmt::format("{:.1f}", sum.seconds / floor_sum) : "");
  fmt::print("{:<44} {:>6} {:>9.3f} {:>6.1f}%\n", "step (profiled)", "", 1e3 * total / steps,
             100.0);
}

// The profile as JSON (with --json --profile).
nlohmann::json profile_json(const StepBenchmarkResult& r, const RooflineCeilings& c, int steps) {
  nlohmann::json kinds = nlohmann::json::array(), shapes = nlohmann::json::array();
  for (const auto& [name, p] : by_time(r.ops))
    kinds.push_back({{"op", name}, {"calls_per_step", double(p.calls) / steps},
                     {"ms_per_step", 1e3 * p.seconds / steps},
                     {"gflop_per_step", p.flops / steps / 1e9}});
  for (const auto& [name, p] : by_time(r.op_shapes)) {
    const double floor = floor_seconds(p, c);
    shapes.push_back({{"op", name}, {"calls_per_step", double(p.calls) / steps},
                      {"ms_per_step", 1e3 * p.seconds / steps},
                      {"gflop_per_step", p.flops / steps / 1e9},
                      {"gb_per_step", p.bytes / steps / 1e9},
                      {"floor_ms_per_step", 1e3 * floor / steps}});
  }
  return {{"timing", r.profile_events ? "events" : "host_clock"},
          {"ms_per_step", 1e3 * median(r.profiled_step_seconds)},
          {"step_ms", [&] {
             std::vector<double> ms;
             for (double s : r.profiled_step_seconds) ms.push_back(1e3 * s);
             return ms;
           }()},
          {"marks_per_step", r.profile_marks / steps},
          {"gemm_gflops_ceiling", c.gemm_gflops},
          {"gemm_dtype", std::string(name_of(c.gemm_dtype))},
          {"copy_gbs_ceiling", c.copy_gbs},
          {"ops", kinds},
          {"op_shapes", shapes}};
}

void add_gemm(CLI::App& bench) {
  struct Args {
    int size = 3072, repeats = 5, threads = 0;
    std::string dtype = "f32", device = "cpu";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand(
      "gemm", "Measure the GEMM rate (the device peak used for MFU) and cache it");
  cmd->add_option("--size", args->size, "Square matrix size")->check(CLI::Range(64, 16384));
  cmd->add_option("--repeats", args->repeats, "Timed repetitions (best is kept)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", args->dtype,
                  "Operand type: f32 (the peak of f32 runs, and of fp16 runs on the CPU), bf16 "
                  "(of bf16 runs) or f16 (of fp16 runs on a GPU)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_option("--device", args->device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->callback([args] {
    set_compute_threads(args->threads);
    const DType dtype = args->dtype == "bf16"  ? DType::bf16
                        : args->dtype == "f16" ? DType::f16
                                               : DType::f32;
    MemoryTracker memory;
    const auto backend = make_backend(parse_name<Device>(args->device, "--device"), memory);
    GemmRate rate = measure_gemm_rate(*backend, args->size, args->repeats, dtype);
    store_gemm_rate(rate);
    if (args->json)
      fmt::print("{}\n", nlohmann::json{{"gflops", rate.gflops},
                                        {"threads", rate.threads},
                                        {"size", rate.size},
                                        {"dtype", args->dtype},
                                        {"device", args->device},
                                        {"hardware", rate.cpu},
                                        {"switches", Switches::process().to_json()}}
                             .dump());
    else
      fmt::print("{} GEMM {}^3 on {}{}: {:.1f} GFLOP/s (best cached: {:.1f}, used as the MFU "
                 "peak)\n",
                 args->dtype, rate.size, rate.cpu,
                 rate.threads > 0 ? fmt::format(", {} threads", rate.threads) : "", rate.gflops,
                 cached_gemm_rate(rate.threads, dtype, rate.cpu).value_or(rate).gflops);
  });
}

void add_step(CLI::App& bench) {
  struct Args {
    std::string model = "gpt2";
    std::int64_t batch = 4, seq = 64;
    int steps = 5, warmup = 1, threads = 0;
    std::string device = "cpu", precision = "fp32";
    bool json = false, profile = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand("step", "Time training steps of a model preset");
  cmd->add_flag("--profile", args->profile,
                "Also run as many profiled steps, time every backend op (on a GPU with events on "
                "its stream, unsynchronized) and print where the step goes, per op and shape, "
                "beside each op's roofline floor");
  cmd->add_option("--model", args->model, "Model preset (see `kintsugi train --help-config`)");
  cmd->add_option("--batch", args->batch, "Sequences per step");
  cmd->add_option("--seq", args->seq, "Tokens per sequence");
  cmd->add_option("--steps", args->steps, "Timed steps");
  cmd->add_option("--warmup", args->warmup, "Untimed steps first");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "Device: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "Weights and activations: fp32, bf16 or fp16 (train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->callback([args] {
    set_compute_threads(args->threads);
    const ModelConfig config = model_preset(args->model);
    const Device device = parse_name<Device>(args->device, "--device");
    MemoryTracker memory;
    const Precision precision = parse_name<Precision>(args->precision, "--precision");
    const GemmRate gemm = local_gemm_rate(*make_backend(device, memory));
    // The roofline's ceilings, measured first on a backend of their own (its memory is not the
    // step's).
    RooflineCeilings ceilings;
    if (args->profile)
      ceilings = measure_roofline_ceilings(*make_backend(device, memory),
                                           gemm_dtype(precision, device));
    const auto r = run_step_benchmark(config, args->batch, args->seq, args->steps, args->warmup,
                                      args->profile, device, precision);
    const double fraction = r.gflops / gemm.gflops;
    std::vector<double> step_ms;
    for (double s : r.step_seconds) step_ms.push_back(s * 1e3);
    if (args->json) {
      nlohmann::json j{{"impl", "kintsugi"},
                       {"model", args->model},
                       {"batch", args->batch},
                       {"seq", args->seq},
                       {"threads", compute_threads()},
                       {"device", args->device},
                       {"hardware", gemm.cpu},
                       {"precision", args->precision},
                       {"steps", args->steps},
                       {"ms_per_step", r.median_seconds * 1e3},
                       {"step_ms", step_ms},
                       {"tokens_per_s", r.tokens_per_s},
                       {"gflops", r.gflops},
                       {"gemm_gflops", gemm.gflops},
                       {"fraction_of_gemm", fraction},
                       {"peak_memory_bytes", r.peak_memory_bytes},
                       {"losses", r.losses},
                       {"grad_norms", r.grad_norms},
                       {"switches", Switches::process().to_json()}};
      if (args->profile) j["profile"] = profile_json(r, ceilings, args->steps);
      j["energy_source"] = r.energy_source;
      if (r.joules_per_step) {
        j["joules_per_step"] = *r.joules_per_step;
        j["joules_per_token"] = *r.joules_per_step / static_cast<double>(args->batch * args->seq);
        j["power_w"] = *r.joules_per_step / mean_seconds(r.step_seconds);
      }
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("{} ({:.1f}M parameters), batch {} x seq {}, {} threads, {} timed steps\n",
               args->model, parameter_count(config) / 1e6, args->batch, args->seq,
               compute_threads(), args->steps);
    fmt::print("{:>12} {:>12} {:>10} {:>14}\n", "ms/step", "tokens/s", "GFLOP/s", "of GEMM rate");
    fmt::print("{:>12.1f} {:>12.0f} {:>10.1f} {:>13.1f}%\n", r.median_seconds * 1e3,
               r.tokens_per_s, r.gflops, 100 * fraction);
    fmt::print("GEMM rate {:.1f} GFLOP/s: {}\n", gemm.gflops, gemm.source);
    if (r.joules_per_step)
      fmt::print("energy {:.4g} J/step, {:.4g} J/token, {:.0f} W (mean of the timed steps; {})\n",
                 *r.joules_per_step,
                 *r.joules_per_step / static_cast<double>(args->batch * args->seq),
                 *r.joules_per_step / mean_seconds(r.step_seconds), r.energy_source);
    else
      fmt::print("{}\n", r.energy_source);
    if (args->profile) {
      print_profile_header(r, ceilings, args->steps);
      print_profile_kinds(r, args->steps);
      print_profile_shapes(r, ceilings, args->steps);
    }
  });
}

// The `local` cluster's links, measured through the communicator training uses.
void add_comm(CLI::App& bench) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "comm", "Measure latency and bandwidth between local ranks (run under mpirun -np 2) and "
              "cache them for the planner's local cluster; time the collectives over all ranks");
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([json] {
    if (!launched_by_mpi())
      fail("bench comm measures links between ranks: run it as `mpirun -np 2 kintsugi bench comm`");
    MpiRuntime mpi(nullptr, nullptr, fault_hooks_from(Switches::process()).stop_at_start);
    auto world = make_world_communicator();
    LocalLinks links = measure_local_links(*world);
    const auto collectives = time_collectives(*world);
    if (world->rank() != 0) return;
    // The planner's per-collective rates: the largest buffer timed (64 MiB; the sweep
    // ascends), where the per-message latency no longer counts.
    for (const auto& c : collectives) {
      double* rate = c.op == CommOp::all_reduce       ? &links.all_reduce_gbs
                     : c.op == CommOp::reduce_scatter ? &links.reduce_scatter_gbs
                     : c.op == CommOp::all_gather     ? &links.all_gather_gbs
                                                      : nullptr;
      if (rate) *rate = c.bus_gbs;
    }
    store_local_links(links);
    if (*json) {
      nlohmann::json timings = nlohmann::json::array();
      for (const auto& c : collectives)
        timings.push_back({{"op", name_of(c.op)}, {"bytes", c.bytes}, {"median_us", c.median_us},
                           {"bus_gbs", c.bus_gbs}});
      fmt::print("{}\n", nlohmann::json{{"latency_us", links.latency_us},
                                        {"bandwidth_gbs", links.bandwidth_gbs},
                                        {"memory_bandwidth_gbs", links.memory_bandwidth_gbs},
                                        {"ranks", world->size()},
                                        {"cpu", links.cpu},
                                        {"collectives", timings},
                                        {"switches", Switches::process().to_json()}}
                             .dump());
      return;
    }
    fmt::print("{} ranks ({}): latency {:.1f} us, bandwidth {:.2f} GB/s between ranks 0 and 1; "
               "memory copy {:.1f} GB/s; all-reduce {:.2f}, reduce-scatter {:.2f}, all-gather "
               "{:.2f} bus GB/s on 64 MiB; cached for `kintsugi plan --cluster local`\n",
               world->size(), links.cpu, links.latency_us, links.bandwidth_gbs,
               links.memory_bandwidth_gbs, links.all_reduce_gbs, links.reduce_scatter_gbs,
               links.all_gather_gbs);
    fmt::print("\n{:<16} {:>10} {:>12} {:>14}\n", "collective (f32)", "bytes", "median us",
               "bus GB/s");
    for (const auto& c : collectives)
      fmt::print("{:<16} {:>10} {:>12.1f} {:>14.2f}\n", name_of(c.op), c.bytes, c.median_us,
                 c.bus_gbs);
  });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks: GEMM rate, training-step throughput, links between ranks");
  bench->require_subcommand(1);
  add_gemm(*bench);
  add_step(*bench);
  add_comm(*bench);
}

}  // namespace kintsugi::cli
