// `kintsugi tune`: take the planner's top-k layouts, run a few real steps of each through
// mpirun, refit the cost model's efficiency terms to the measurements (plan/refit.hpp), and
// report the best layout with predicted vs measured step times.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/cli/cluster_choice.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/plan/refit.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi::cli {

namespace fs = std::filesystem;

namespace {

struct TuneArgs {
  std::string config, cluster = "local", out = "runs/tune", mpirun = "mpirun", device;
  std::vector<std::string> overrides;
  // The layout pins, as plan takes them (cli/layout_flags.hpp): what tune searches and runs.
  LayoutFlagValues pins;
  std::int64_t ranks = 0, top = 3, steps = 4;
  bool json = false;
};

std::string self_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "kintsugi" : p.string();
}

// Median step time of a run's metrics.jsonl, leaving out the first step (allocation, first
// touches of memory, caches), as bench step does with its warm-up, and the spread of the timed
// steps (refit.hpp relative_spread).
struct StepTimes {
  double seconds = 0, spread = 0;
};
StepTimes measured_step_seconds(const fs::path& metrics) {
  std::ifstream in(metrics);
  if (!in) fail("{} was not written: the run failed (see {})", metrics.string(),
                (metrics.parent_path() / "log.txt").string());
  std::vector<double> ms;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step_ms")) ms.push_back(j.at("step_ms").get<double>());  // not step 0's eval
  }
  if (ms.size() < 2)
    fail("{} has {} steps; tune needs at least 2 (--steps)", metrics.string(), ms.size());
  ms.erase(ms.begin());
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return {(n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) / 1e3, relative_spread(ms)};
}

// Measured power per device of a run: the median over its records that carry energy, the first
// left out, of the job's joules per second (metrics.jsonl's energy_j over the energy_s it
// covers, train/job_energy.hpp) over its `devices`; none when the run measured no energy.
std::optional<double> measured_watts_per_device(const fs::path& metrics, std::int64_t devices) {
  std::ifstream in(metrics);
  std::vector<double> watts;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("energy_j")) continue;     // step 0's record, or no counter advanced
    if (std::exchange(first, false)) continue;  // the first span: the warm-up
    watts.push_back(j.at("energy_j").get<double>() / j.at("energy_s").get<double>() /
                    static_cast<double>(devices));
  }
  if (watts.empty()) return std::nullopt;
  std::sort(watts.begin(), watts.end());
  const std::size_t n = watts.size();
  return n % 2 ? watts[n / 2] : 0.5 * (watts[n / 2 - 1] + watts[n / 2]);
}

// A directory under --out (or --out itself), made now: fails naming --out when `dir` cannot be
// one.
void make_directory(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("--out {} is a file, not a directory: choose another --out", dir.string());
  fs::create_directories(dir, ec);
  if (ec) fail("--out {} cannot be created ({}): choose another --out", dir.string(), ec.message());
}

struct LayoutRun {
  StepTimes steps;
  std::optional<double> watts_per_device;
};

LayoutRun run_layout(const TuneArgs& a, const RunConfig& base, const Layout& l,
                     const fs::path& dir) {
  make_directory(dir);
  const fs::path config = dir / "run.toml";
  std::ofstream(config) << layout_config_toml(base, l);
  const std::string command = fmt::format(
      "{} -q -np {} --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 {} train --config {} "
      "--out {} --overwrite --set train.threads=1 --set train.save_checkpoint=false > {} 2>&1",
      a.mpirun, l.parallel.world(), self_path(), config.string(), dir.string(),
      (dir / "log.txt").string());
  if (std::system(command.c_str()) != 0)
    fail("the run of {} failed: {} (see {})", describe(l), command, (dir / "log.txt").string());
  return {measured_step_seconds(dir / "metrics.jsonl"),
          measured_watts_per_device(dir / "metrics.jsonl", l.parallel.world())};
}

double error_percent(double predicted, double measured) {
  return 100.0 * (predicted - measured) / measured;
}

// The run each layout trains: the config's, for --steps steps, logging every one, on the
// config's train.device or --device's (refused, in one line, where this build or machine lacks
// it). --out is made first: the runs and the refit cluster go there.
RunConfig tune_config(const TuneArgs& a) {
  if (a.top < 1) fail("--top {} must be at least 1", a.top);
  if (a.steps < 2) fail("--steps {} must be at least 2: the first step is not timed", a.steps);
  make_directory(a.out);  // before any run: the runs and the refit cluster go there
  RunConfig base = load_run_config(a.config, a.overrides);
  base.train.steps = a.steps;
  base.train.eval_every = 0;
  base.train.eval_batches = 1;
  base.train.log_every = 1;
  // The runs train on the config's train.device, or --device's; the local cluster is then
  // that device's.
  if (!a.device.empty()) base.train.device = parse_name<Device>(a.device, "--device");
  if (base.train.device != Device::cpu) {
    // Refuses, in one line, a device this build or machine lacks before any run is launched.
    MemoryTracker memory;
    make_backend(base.train.device, memory);
  }
  return base;
}

// The measurements refit the spec they are compared with: runs on this machine's CPU say nothing
// about a GPU cluster's GEMMs and links (and the preset's node would set how many ranks are
// launched here). Every spec but `local` describes an accelerator.
void check_cluster_device(const TuneArgs& a, Device device) {
  if (device == Device::cpu && a.cluster != "local")
    fail("--cluster {} describes another machine's devices, and tune measures on this machine's "
         "CPU: refitting it from CPU runs would be wrong; use --cluster local (the default) or "
         "--device cuda on that machine",
         a.cluster);
}

// The top k layouts of distinct shapes (tp, grid, pp, dp, micro-batch, schedule, sp): variants
// that differ only in recomputation or ZeRO stage are often predicted equal and would measure
// nearly the same step, telling the refit nothing new.
std::vector<Prediction> distinct_shapes(const std::vector<Prediction>& ranked, std::int64_t top) {
  std::vector<Prediction> chosen;
  for (const Prediction& p : ranked) {
    if (static_cast<std::int64_t>(chosen.size()) == top) break;
    if (std::none_of(chosen.begin(), chosen.end(),
                     [&](const Prediction& c) { return same_shape(c.layout, p.layout); }))
      chosen.push_back(p);
  }
  return chosen;
}

// What tune measured, and the refit of the cluster it started from.
struct TuneResult {
  Device device = Device::cpu;
  ChosenCluster choice;      // the cluster before the refit, with its notes
  std::int64_t world = 0;    // ranks of every run
  std::vector<Measured> runs;
  std::vector<double> watts;  // per device, of the runs that measured energy
  Refit refit;
  RefitPlan closure;          // the refit cluster's plan against the runs (plan/refit.hpp)
  bool power_refit = false;   // [power] refit from the runs' measured energy
  std::vector<Prediction> after;  // each run's layout predicted on the refit cluster
};

// Runs the plan's top layouts and refits the cluster to them until plan -> tune -> plan closes.
TuneResult measure_and_refit(const TuneArgs& a, const RunConfig& base) {
  // Grids run on both devices (docs/parallelism.md), so tune measures them like 1D layouts;
  // the pins narrow the search as plan's do, read before anything is measured.
  SearchSpace space;
  space.pins = layout_pins(a.pins);
  TuneResult r;
  r.device = base.train.device;
  check_cluster_device(a, r.device);
  const Workload w = workload_of(base);
  // The CPU's local cluster defaults to 4 ranks sharing the cores; a device's to one rank per
  // visible device.
  const std::int64_t ranks = a.ranks > 0 || r.device != Device::cpu ? a.ranks : 4;
  r.choice = choose_cluster(a.cluster, r.device, ranks, w);
  const ClusterSpec& cluster = r.choice.spec;
  // The ranks asked for, or the cluster's node.
  r.world = a.ranks > 0 ? a.ranks : cluster.devices_per_node;
  if (!a.json) print_notes(r.choice.notes);
  const SearchResult found = search_layouts(w, cluster, r.world, space);
  if (found.ranked.empty())
    fail("no layout of this model fits {} ranks with global batch {}", r.world, w.global_batch);
  auto measure = [&](const Prediction& p, const char* why) {
    const fs::path dir = fs::path(a.out) / fmt::format("layout-{}", r.runs.size() + 1);
    if (!a.json)
      fmt::print("running {} ({} steps on {} ranks, {}){}...\n", describe(p.layout), a.steps,
                 r.world, name_of(r.device), why);
    std::fflush(stdout);
    const LayoutRun run = run_layout(a, base, p.layout, dir);
    if (run.watts_per_device) r.watts.push_back(*run.watts_per_device);
    return Measured{p, run.steps.seconds, run.steps.spread};
  };
  for (const Prediction& p : distinct_shapes(found.ranked, a.top))
    r.runs.push_back(measure(p, ""));
  // Plan -> tune -> plan must close: when the refit ranks first a layout that was not measured
  // and that does not tie with the measured fastest, that layout is measured too and the refit
  // redone, at most --top more runs (plan/refit.hpp refit_until_closed).
  const Tuned tuned = refit_until_closed(
      cluster, w, r.world, r.runs,
      [&](const Prediction& p) { return measure(p, " (the refit ranks it first)"); }, a.top,
      space);
  r.refit = tuned.refit;
  r.closure = tuned.plan;
  // [power] from measured energy only when every run measured it (docs/energy.md); else kept.
  r.power_refit = !r.watts.empty() && r.watts.size() == r.runs.size();
  if (r.power_refit) r.refit.cluster = refit_power(r.refit.cluster, r.watts);
  for (const Measured& m : r.runs)
    r.after.push_back(predict(w, r.refit.cluster, m.predicted.layout));
  return r;
}

// The report as JSON, printed with --json and always written next to the refit cluster.
nlohmann::json tune_json(const TuneArgs& a, const TuneResult& r) {
  const RefitPlan& closure = r.closure;
  nlohmann::json j = {{"device", std::string(name_of(r.device))},
                      {"cluster_notes", r.choice.notes},
                      {"compute_factor", r.refit.compute_factor},
                      {"comm_factor", r.refit.comm_factor},
                      {"comm_fitted", r.refit.comm_fitted},
                      {"refit_error", r.refit.cluster.refit_error},
                      {"refit_plan_best", describe(closure.top.layout)},
                      {"refit_plan_best_is_measured_best", closure.top_run == closure.fastest},
                      {"refit_plan_ties_with_measured_best", closure.ties},
                      {"refit_plan_tied_with_best", closure.tied_with_top},
                      {"refit_plan_layouts", closure.ranked},
                      {"power_refit", r.power_refit},
                      {"best", closure.fastest},
                      {"refit_cluster", (fs::path(a.out) / "cluster-refit.toml").string()},
                      {"layouts", nlohmann::json::array()}};
  if (r.power_refit) {
    j["active_watts"] = r.refit.cluster.active_watts;
    j["measured_watts_per_device"] = r.watts;
  }
  for (std::size_t i = 0; i < r.runs.size(); ++i)
    j["layouts"].push_back({{"layout", describe(r.runs[i].predicted.layout)},
                            {"predicted_s", r.runs[i].predicted.time.total()},
                            {"measured_s", r.runs[i].seconds},
                            {"measured_spread", r.runs[i].noise},
                            {"refit_predicted_s", r.after[i].time.total()}});
  return j;
}

// Each run: predicted, measured, its spread and the errors before and after the refit.
void print_tune_table(const TuneResult& r) {
  fmt::print("\n{:>3} {:<40} {:>12} {:>12} {:>7} {:>8} {:>12} {:>8}\n", "#", "layout",
             "predicted", "measured", "spread", "error", "refit pred.", "error");
  for (std::size_t i = 0; i < r.runs.size(); ++i) {
    const Measured& m = r.runs[i];
    fmt::print("{:>3} {:<40} {:>10.1f}ms {:>10.1f}ms {:>6.0f}% {:>7.0f}% {:>10.1f}ms {:>7.0f}%\n",
               i + 1, describe(m.predicted.layout), m.predicted.time.total() * 1e3,
               m.seconds * 1e3, 100 * m.noise, error_percent(m.predicted.time.total(), m.seconds),
               r.after[i].time.total() * 1e3, error_percent(r.after[i].time.total(), m.seconds));
  }
}

// The refit's factors and error, and its [power].
void print_refit(const TuneResult& r) {
  const ClusterSpec& cluster = r.choice.spec;
  const Refit& refit = r.refit;
  fmt::print("\nrefit: compute x {:.3f} (gemm.max_efficiency {:.3f} -> {:.3f}), links x {:.3f}{}; "
             "error +-{:.1f}% (the largest of the refit's errors and the measurements' spreads)\n",
             refit.compute_factor, cluster.gemm_max_efficiency, refit.cluster.gemm_max_efficiency,
             refit.comm_factor,
             refit.comm_fitted ? ""
                               : " (kept: not separable from compute, or one factor is within "
                                 "the measurements' spread)",
             100 * refit.cluster.refit_error);
  if (r.power_refit)
    fmt::print("power: {:.1f} W per device measured (mean of the runs' medians{}): "
               "power.active_watts {} -> {:.1f}\n",
               refit.cluster.active_watts, r.watts.size() > 1 ? "" : ", one run",
               cluster.has_power() ? fmt::format("{:.1f}", cluster.active_watts) : "unset",
               refit.cluster.active_watts);
  else
    fmt::print("power: not refit ({}): the runs' metrics hold no measured energy "
               "(docs/energy.md)\n",
               cluster.has_power() ? "power.active_watts kept" : "the spec has no [power]");
}

// Whether the refit plan's #1 closes the loop: the measured fastest, tied with it, or neither.
std::string closes_text(const TuneArgs& a, const TuneResult& r) {
  const RefitPlan& closure = r.closure;
  const Layout& fastest = r.runs[closure.fastest].predicted.layout;
  if (closure.top_run == closure.fastest) return "the measured fastest";
  if (closure.ties)
    return fmt::format("ties with the measured fastest, {} (predicted within the refit's "
                       "error, +-{:.0f}%: the plan cannot order them)",
                       describe(fastest), 100 * r.refit.cluster.refit_error);
  return fmt::format("not measured, and predicted faster than the measured fastest, {}, "
                     "by more than the refit's error (+-{:.0f}%), after {} more runs: a "
                     "larger --top measures more layouts",
                     describe(fastest), 100 * r.refit.cluster.refit_error, a.top);
}

void print_best(const TuneArgs& a, const TuneResult& r) {
  const std::size_t best = r.closure.fastest;
  fmt::print("best measured: {}: measured {:.1f} ms, predicted {:.1f} ms before the refit, "
             "{:.1f} ms after\nrefit plan: #1 {} ({:.1f} ms): {}\nrefit cluster written to {}\n",
             describe(r.runs[best].predicted.layout), r.runs[best].seconds * 1e3,
             r.runs[best].predicted.time.total() * 1e3, r.after[best].time.total() * 1e3,
             describe(r.closure.top.layout), r.closure.top.time.total() * 1e3,
             closes_text(a, r), (fs::path(a.out) / "cluster-refit.toml").string());
  fmt::print("report written to {}\n", (fs::path(a.out) / "tune.json").string());
}

// A refit error so wide that most layouts tie: the plan on this spec cannot choose.
void print_wide_error_note(const TuneResult& r) {
  const RefitPlan& closure = r.closure;
  if (!(2 * closure.tied_with_top >= closure.ranked && closure.ranked > 2)) return;
  double spread = 0;
  for (const Measured& m : r.runs) spread = std::max(spread, m.noise);
  const double error = r.refit.cluster.refit_error;
  fmt::print("note: {} of the refit plan's {} layouts tie with its #1 within the refit's error "
             "(+-{:.0f}%{}), so it cannot order most of them: measure on a quiet machine or "
             "with more --steps\n",
             closure.tied_with_top + 1, closure.ranked, 100 * error,
             spread >= error ? fmt::format(", set by the spread of the measured steps, {:.0f}%: "
                                           "a loaded machine?",
                                           100 * spread)
                             : "");
}

void run_tune(const TuneArgs& a) {
  const RunConfig base = tune_config(a);
  const TuneResult r = measure_and_refit(a, base);
  std::ofstream(fs::path(a.out) / "cluster-refit.toml")
      << "# Refit by `kintsugi tune` from measured steps; use with --cluster <this file>\n"
      << to_toml(r.refit.cluster);
  const nlohmann::json j = tune_json(a, r);
  data::write_text_file(fs::path(a.out) / "tune.json", j.dump(2) + "\n");
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
    return;
  }
  print_tune_table(r);
  print_refit(r);
  print_best(a, r);
  print_wide_error_note(r);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand(
      "tune", "Run the planner's top layouts for a few steps, measure, refit the cost model");
  cmd->add_option("--config,-c", a->config, "Run config (TOML) of the model to tune")->required();
  cmd->add_option("--set", a->overrides, "Override a config key, e.g. --set train.global_batch=8");
  cmd->add_option("--cluster", a->cluster, "Cluster spec to start from (default: local)");
  cmd->add_option("--ranks", a->ranks,
                  "Ranks to launch (the local cluster's devices; default: 4 on the CPU, one per "
                  "visible GPU with --device cuda)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", a->device,
                  "Where the runs train: cpu or cuda (train.device; default: the config's); "
                  "the local cluster is that device's, measured (docs/planner.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--top", a->top, "Layouts to run (the planner's best k)");
  cmd->add_option("--steps", a->steps, "Steps per run (the first is not timed)");
  cmd->add_option("--out", a->out, "Directory for the runs and the refit cluster");
  cmd->add_option("--mpirun", a->mpirun, "MPI launcher");
  cmd->add_flag("--json", a->json, "Print JSON");
  add_layout_pins(*cmd, a->pins, pinnable_keys());
  cmd->callback([a] { run_tune(*a); });
}

}  // namespace kintsugi::cli
