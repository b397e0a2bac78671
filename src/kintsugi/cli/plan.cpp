// `kintsugi plan`: predict memory and step time of every valid layout of a model on a cluster
// and print the best (plan/cost_model.hpp, plan/search.hpp); `--memory` alone answers how much
// memory a model's training state needs.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "kintsugi/cli/cluster_choice.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/cli/plan_report.hpp"
#include "kintsugi/cli/plan_run_config.hpp"
#include "kintsugi/cli/text_option.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/svg_plot.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/plan/campaign.hpp"
#include "kintsugi/plan/critical_batch.hpp"
#include "kintsugi/plan/rampup_suggestion.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/plan/memory.hpp"
#include "kintsugi/plan/scaling.hpp"
#include "kintsugi/plan/refit.hpp"
#include "kintsugi/plan/search.hpp"
#include "kintsugi/plan/value_list.hpp"

namespace kintsugi::cli {

namespace {

struct PlanArgs {
  std::string model, config, cluster = "local", grad_precision, write_config;
  std::string attention, pipeline_p2p, device, objective, scaling, plot;
  std::vector<std::string> overrides, recompute, precision, tensor_grid;
  // The layout pins, named as train's flags (cli/layout_flags.hpp), and the other lists or
  // ranges (plan/value_list.hpp): parsed in run_plan, so a bad value names its option.
  LayoutFlagValues pins;
  std::string nodes = "1", global_batch, micro_batch, grad_accum;
  std::int64_t ranks = 0, seq = 0, max_global_batch = 0, max_nodes = 0, top = 10;
  // 0: not given (positive_number refuses a 0, negative or non-finite value on the command line).
  double tokens = 0, tokens_per_param = 0;
  double critical_batch_loss = 0;  // no critical-batch limit (plan/critical_batch.hpp)
  double rampup_tokens = 0;        // no ramp-up suggested (plan/rampup_suggestion.hpp)
  bool json = false, wide = false, memory = false, tp_across_nodes = false;
};

// The run the plan is for: a run config (--config, gpt2 models that train here) or a preset
// (--model, any family), with --seq and --grad-precision applied; the global batch and the
// precision are the search's (run_plan), each defaulting to the config's.
RunConfig base_config(const PlanArgs& a) {
  RunConfig c;
  if (!a.device.empty() && a.cluster != "local")
    fail("--device picks the local cluster's devices; --cluster {} says what its devices are",
         a.cluster);
  if (!a.config.empty()) {
    if (!a.model.empty()) fail("plan takes --model or --config, not both");
    c = load_run_config(a.config, a.overrides);
  } else {
    if (!a.overrides.empty()) fail("--set needs --config");
    c.model = model_preset(a.model.empty() ? "gpt-tiny" : a.model);
    c.train.precision = Precision::bf16;
  }
  if (a.seq > 0) c.model.seq_len = a.seq;
  if (!a.grad_precision.empty())
    c.train.grad_precision = parse_name<GradPrecision>(a.grad_precision, "--grad-precision");
  validate(c.model);
  return c;
}

void print_memory(const PlanArgs& a) {
  // Bytes per parameter of the training state (plan/memory.hpp), without sharding.
  if (a.precision.size() > 1) fail("plan --memory takes one --precision");
  const Precision precision = a.precision.empty()
                                  ? Precision::bf16
                                  : parse_name<Precision>(a.precision.front(), "--precision");
  const GradPrecision grads = a.grad_precision.empty()
                                  ? GradPrecision::fp32
                                  : parse_name<GradPrecision>(a.grad_precision, "--grad-precision");
  const bool mixed = is_mixed(precision);
  const std::int64_t pb = element_bytes(precision),
                     gb = static_cast<std::int64_t>(size_of(grad_dtype(precision, grads)));
  const StateBytes per = model_state_bytes(1, 0, 1, pb, gb, mixed);
  fmt::print("training state per parameter ({} weights, {} gradients, AdamW): {} weights + {} "
             "gradients + {} optimizer ({}) = {} bytes\n\n",
             precision, grads == GradPrecision::param ? precision : Precision::fp32, per.parameters, per.gradients,
             per.optimizer_state, mixed ? "f32 master weights and two f32 moments" : "two f32 moments",
             per.total());
  std::vector<std::string> models = {"gpt-22b", "gpt-175b", "gpt-1t"};
  if (!a.model.empty()) models = {a.model};
  // The Frontier study's table counts 20 bytes per parameter (6 weights, 4 gradients, 8 Adam,
  // rounded up): shown next to kintsugi's accounting for comparison.
  fmt::print("{:<12} {:>14} {:>12} {:>12} {:>12} {:>12} {:>14}\n", "model", "parameters",
             "weights", "gradients", "optimizer", "total", "at 20 B/param");
  for (const auto& name : models) {
    const double n = static_cast<double>(parameter_count(model_preset(name)));
    const StateBytes s = model_state_bytes(n, 0, 1, pb, gb, mixed);
    auto tb = [](double bytes) {
      return bytes >= 1e12 ? fmt::format("{:.2f} TB", bytes / 1e12)
                           : fmt::format("{:.0f} GB", bytes / 1e9);
    };
    fmt::print("{:<12} {:>13.2f}B {:>12} {:>12} {:>12} {:>12} {:>14}\n", name, n / 1e9,
               tb(s.parameters), tb(s.gradients), tb(s.optimizer_state), tb(s.total()),
               tb(20 * n));
  }
  fmt::print("\nActivations come on top and depend on the layout: `kintsugi plan --model M "
             "--cluster C --nodes N` accounts for them.\n");
}

std::string does_not_fit(const Prediction& p, const ClusterSpec& cluster) {
  return fmt::format("needs {:.1f} GB of {:.0f}", p.memory.total() / 1e9, cluster.memory_gb);
}

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string out;
  for (std::int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

// The largest global batch the search may use: --max-global-batch's, or with
// --critical-batch-loss the critical batch of the fit (plan/critical_batch.hpp) where that is
// smaller; messages name the flag that set it.
struct BatchLimit {
  std::int64_t sequences = 0;  // 0: no limit
  std::string source;          // what set it: "--max-global-batch 128", "--critical-batch-loss 3 (...)"
  std::int64_t critical_sequences = 0;  // 0: no --critical-batch-loss
  double critical_tokens = 0;
  bool allows(std::int64_t batch) const { return sequences == 0 || batch <= sequences; }
};

BatchLimit batch_limit(const PlanArgs& a, std::int64_t seq_len) {
  BatchLimit limit{a.max_global_batch, fmt::format("--max-global-batch {}", a.max_global_batch)};
  if (a.critical_batch_loss <= 0) return limit;
  const CriticalBatchFit fit;
  limit.critical_sequences = critical_batch_sequences(a.critical_batch_loss, seq_len, fit);
  limit.critical_tokens = critical_batch_tokens(a.critical_batch_loss, fit);
  if (limit.sequences == 0 || limit.critical_sequences < limit.sequences) {
    limit.sequences = limit.critical_sequences;
    limit.source = fmt::format("--critical-batch-loss {} (its critical batch, {:.4g} tokens = {} "
                               "sequences of {})",
                               a.critical_batch_loss, limit.critical_tokens,
                               limit.critical_sequences, seq_len);
  }
  return limit;
}

// The search's axes beyond the layout: node counts, global batches and precisions, each a list
// or range, within --max-nodes and the batch limit.
struct Axes {
  std::vector<std::int64_t> nodes, global_batch;
  std::vector<Precision> precision;
};

Axes axes_of(const PlanArgs& a, const RunConfig& base, const BatchLimit& limit) {
  Axes x;
  for (std::int64_t n : parse_values(a.nodes, "--nodes", 1))
    if (a.max_nodes == 0 || n <= a.max_nodes) x.nodes.push_back(n);
  if (x.nodes.empty()) fail("no --nodes value {} is within --max-nodes {}", a.nodes, a.max_nodes);
  const std::vector<std::int64_t> batches =
      a.global_batch.empty() ? std::vector<std::int64_t>{base.train.global_batch}
                             : parse_values(a.global_batch, "--global-batch", 1);
  for (std::int64_t b : batches)
    if (limit.allows(b)) x.global_batch.push_back(b);
  if (x.global_batch.empty())
    fail("no global batch ({}{}) is within {}: the largest the model's convergence allows, a "
         "limit the search keeps",
         a.global_batch.empty() ? "the config's " : "--global-batch ", list_text(batches),
         limit.source);
  for (const auto& p : a.precision) x.precision.push_back(parse_name<Precision>(p, "--precision"));
  if (x.precision.empty()) x.precision.push_back(base.train.precision);
  return x;
}

// One --tensor-grid value X,Y,Z: three whole numbers of at least 1.
std::vector<std::int64_t> parse_grid(const std::string& text) {
  std::vector<std::int64_t> g;
  bool ok = true;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = text.find(',', begin);
    const std::string part =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    ok = ok && !part.empty() && ec == std::errc{} && end == part.data() + part.size() &&
         value >= 1;
    g.push_back(value);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (!ok || g.size() != 3)
    fail("--tensor-grid '{}' must be none, any or three whole numbers of at least 1, X,Y,Z (e.g. "
         "2,2,1)",
         text);
  return g;
}

SearchSpace space_of(const PlanArgs& a) {
  SearchSpace space;
  auto values = [](const std::string& text, const char* flag, std::int64_t minimum) {
    return text.empty() ? std::vector<std::int64_t>{} : parse_values(text, flag, minimum);
  };
  auto pinned = [&](const char* key, std::int64_t minimum) {
    const auto it = a.pins.find(key);
    return it == a.pins.end() ? std::vector<std::int64_t>{}
                              : values(it->second, flag_of(key).c_str(), minimum);
  };
  space.tp = pinned("parallel.tp", 1);
  space.pp = pinned("parallel.pp", 1);
  space.dp = pinned("parallel.dp", 1);
  space.micro_batch = values(a.micro_batch, "--micro-batch", 1);
  space.grad_accum = values(a.grad_accum, "--grad-accum", 1);
  for (std::int64_t z : pinned("parallel.zero", 0)) space.zero.push_back(zero_stage(z, "--zero"));
  space.hsdp = pinned("parallel.hsdp", 0);
  space.virtual_stages = pinned("parallel.virtual_stages", 1);
  for (const auto& v : pin_list(a.pins, "parallel.schedule"))
    space.schedule.push_back(parse_name<PipelineSchedule>(v, "--schedule"));
  for (const auto& v : a.recompute)
    space.recompute.push_back(parse_name<Recompute>(v, "--recompute"));
  for (const auto& v : pin_list(a.pins, "parallel.sequence_parallel"))
    space.sequence_parallel.push_back(v == "true");
  for (const auto& v : pin_list(a.pins, "parallel.tensor_grid_overlap"))
    space.tensor_grid_overlap.push_back(v == "true");
  // --tensor-grid: `none` (1D tensor parallelism), `any` (every grid) or grids X,Y,Z; given,
  // only what it names is searched.
  if (!a.tensor_grid.empty()) {
    space.one_d = space.grids = false;
    bool any = false;
    for (const auto& v : a.tensor_grid) {
      if (v == "none") {
        space.one_d = true;
      } else if (v == "any") {
        space.grids = any = true;
      } else {
        const std::vector<std::int64_t> g = parse_grid(v);
        space.tensor_grid.push_back(g);
        space.grids = true;
      }
    }
    if (any) space.tensor_grid.clear();
  }
  space.tp_across_nodes = a.tp_across_nodes;
  // A study's search space states micro-batch and gradient accumulation, not the global batch
  // (Table V of Dash et al.): the micro-batch must then be bounded by the list, not by 64.
  if (!space.micro_batch.empty())
    space.max_micro_batch = *std::max_element(space.micro_batch.begin(), space.micro_batch.end());
  return space;
}

// With --grad-accum and no --global-batch, the global batches are what the listed
// micro-batches, accumulation steps and data-parallel sizes make: mb x ga x dp.
std::vector<std::int64_t> batches_from_accumulation(const SearchSpace& s, std::int64_t world,
                                                    const BatchLimit& limit) {
  if (s.micro_batch.empty())
    fail("--grad-accum without --global-batch needs --micro-batch: the global batch is "
         "micro-batch x accumulation x dp");
  std::vector<std::int64_t> out;
  for (std::int64_t dp = 1; dp <= world; ++dp) {
    if (world % dp != 0 || (!s.dp.empty() && std::find(s.dp.begin(), s.dp.end(), dp) == s.dp.end()))
      continue;
    for (std::int64_t mb : s.micro_batch)
      for (std::int64_t ga : s.grad_accum) {
        const std::int64_t b = mb * ga * dp;
        if (limit.allows(b) && std::find(out.begin(), out.end(), b) == out.end())
          out.push_back(b);
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The token budget of --tokens or --tokens-per-param (0: none).
double token_budget(const PlanArgs& a, const ModelConfig& model) {
  if (a.tokens > 0 && a.tokens_per_param > 0)
    fail("plan takes --tokens or --tokens-per-param, not both");
  if (a.tokens_per_param > 0) return a.tokens_per_param * static_cast<double>(parameter_count(model));
  return a.tokens;
}

// `--scaling strong|weak`: the fastest layout at each node count (plan/scaling.hpp), a table, and
// with --plot an SVG of the efficiency.
void run_scaling(const PlanArgs& a, const RunConfig& base, const Axes& axes, const SearchSpace& space,
                 const Workload& w, const ChosenCluster& chosen) {
  if (axes.global_batch.size() != 1 || axes.precision.size() != 1)
    fail("--scaling takes one --global-batch (the first node count's, for weak scaling) and one "
         "--precision");
  if (a.tokens > 0 || a.tokens_per_param > 0 || !a.objective.empty())
    fail("--scaling ranks each node count's layouts by step time; --tokens, --tokens-per-param "
         "and --objective are for the search");
  if (axes.nodes.size() < 2) fail("--scaling needs at least two node counts (--nodes 16:128:x2)");
  if (!a.write_config.empty() || a.rampup_tokens > 0)
    fail("--scaling draws a curve of each node count's fastest layout; {} is for the search's "
         "best (run plan without --scaling)",
         a.write_config.empty() ? "--rampup-tokens" : "--write-config");
  const ClusterSpec& cluster = chosen.spec;
  const Scaling kind = parse_name<Scaling>(a.scaling, "--scaling");
  const std::vector<ScalingPoint> points = scaling_curve(w, cluster, axes.nodes, space, kind);
  if (a.json) {
    nlohmann::json j = {{"model", base.model.name}, {"cluster", cluster.name},
                        {"scaling", std::string(name_of(kind))}, {"seq", w.model.seq_len},
                        {"precision", std::string(name_of(w.precision))},
                        {"points", nlohmann::json::array()}};
    for (const ScalingPoint& p : points) {
      nlohmann::json q = {{"nodes", p.nodes}, {"devices", p.devices},
                          {"global_batch", p.global_batch}, {"fits", p.best.has_value()}};
      if (p.best) {
        q["efficiency"] = p.efficiency;
        q["tokens_per_s_per_device"] = p.tokens_per_s_per_device;
        q["model_tflops_per_device"] = p.model_tflops_per_device;
        q["prediction"] = to_json(*p.best);
      }
      j["points"].push_back(q);
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{} scaling of {} on {} ({}), seq {}, {}: global batch {}{}; the fastest layout "
               "the pins allow at each node count\n",
               name_of(kind), base.model.name, cluster.name, cluster.source, w.model.seq_len,
               w.precision, w.global_batch,
               kind == Scaling::weak ? " at the first node count, growing with the nodes" : "");
    print_notes(chosen.notes);
    std::vector<std::vector<std::string>> rows;
    for (const ScalingPoint& p : points) {
      rows.push_back({std::to_string(p.nodes), std::to_string(p.devices),
                      std::to_string(p.global_batch),
                      p.best ? describe(p.best->layout) : "no layout fits"});
      if (p.best)
        rows.back().insert(rows.back().end(),
                           {seconds_text(p.best->time.total()),
                            rate_text(p.tokens_per_s_per_device),
                            three_digits_text(p.model_tflops_per_device),
                            fmt::format("{:.1f}%", 100 * p.efficiency)});
      else
        rows.back().resize(8);
    }
    print_table({{"nodes"}, {"devs"}, {"GBS"}, {"layout", true}, {"step"}, {"tok/s/dev"},
                 {"TF/s/dev"}, {"eff"}},
                rows, 3);
    fmt::print("\ndevs: devices; tok/s/dev: tokens/s per device; TF/s/dev: model TFLOP/s per "
               "device;\neff: efficiency, tokens/s per device over the first fitting row's ({}).\n",
               kind == Scaling::strong ? "(T_1 N_1) / (T_N N), the global batch fixed"
                                       : "T_1 / T_N, the batch per replica fixed");
  }
  if (std::none_of(points.begin(), points.end(), [](const ScalingPoint& p) { return p.best.has_value(); }))
    fail("no layout fits at any node count: add nodes or allow more sharding");
  if (!a.plot.empty()) {
    LinePlot plot{.title = fmt::format("{} scaling: {} on {}", name_of(kind), base.model.name,
                                       cluster.name),
                  .x_label = "devices",
                  .y_label = "efficiency (%)",
                  .log2_x = true};
    PlotSeries predicted{.label = "predicted (kintsugi plan)", .color = "#1f77b4"};
    PlotSeries ideal{.label = "ideal", .color = "#999", .dashed = true};
    for (const ScalingPoint& p : points)
      if (p.best) {
        predicted.points.emplace_back(static_cast<double>(p.devices), 100 * p.efficiency);
        ideal.points.emplace_back(static_cast<double>(p.devices), 100.0);
      }
    plot.series = {ideal, predicted};
    write_line_plot(a.plot, plot);
    if (!a.json) fmt::print("wrote {}\n", a.plot);
  } else if (!a.json) {
    fmt::print("(--plot FILE.svg draws the efficiency against the devices)\n");
  }
}

// --critical-batch-loss: what the critical batch is, and what it leaves out.
std::string critical_batch_note(const PlanArgs& a, const BatchLimit& limit, std::int64_t seq_len) {
  const CriticalBatchFit fit;
  const std::string head = fmt::format(
      "critical batch at loss {} nats/token: B_crit = {:.3g} / L^(1/{}) = {:.4g} tokens",
      a.critical_batch_loss, fit.b_star_tokens, fit.alpha_b, limit.critical_tokens);
  const char* source = "(Kaplan et al. 2020, Eq. 1.4; losses on WebText2 with GPT-2's tokenizer)";
  if (limit.critical_sequences >= kUnboundedCriticalBatch)
    return fmt::format("{} {}: above any global batch, none is left out{}", head, source,
                       limit.sequences > 0 && limit.sequences < kUnboundedCriticalBatch
                           ? fmt::format(" (--max-global-batch {} still limits)", limit.sequences)
                           : "");
  return fmt::format("{} = {} sequences of {} {}: global batches above {} are left out{}", head,
                     limit.critical_sequences, seq_len, source, limit.sequences,
                     limit.sequences < limit.critical_sequences ? " (--max-global-batch)" : "");
}

// --rampup-tokens: a batch ramp-up for the best layout (plan/rampup_suggestion.hpp).
std::optional<RampupSuggestion> rampup_for(const PlanArgs& a, const Candidate& best) {
  if (a.rampup_tokens <= 0) return std::nullopt;
  return suggest_rampup(best.workload.model, best.prediction.layout, best.workload.global_batch,
                        a.rampup_tokens);
}

std::string rampup_text(const RampupSuggestion& r, const Candidate& best, double ramp_tokens) {
  const std::int64_t seq = best.workload.model.seq_len;
  return fmt::format(
      "train.batch_rampup = [{}, {}, {}]: global batch {} ({} tokens) -> {} by {} "
      "over the first {:.3g} tokens. GPT-3's recipe (Brown et al. 2020, App. B): "
      "from 32K tokens, linear over the first 4-12B; the start is the smallest "
      "batch at or above 32K tokens in steps of {} sequences, which this layout "
      "splits (dp x micro-batch{})",
      r.start, r.increment, r.samples, r.start, r.start * seq, best.workload.global_batch,
      r.increment, ramp_tokens, r.increment,
      r.increment == best.prediction.layout.parallel.dp * best.prediction.layout.micro_batch
          ? ""
          : " x pp: the schedule's rounds");
}

void run_plan(const PlanArgs& a) {
  if (a.memory) return print_memory(a);
  if (!a.plot.empty() && a.scaling.empty())
    fail("--plot {} draws a --scaling curve: add --scaling strong or weak", a.plot);
  // Checked before any work: a directory here would be reported written and hold nothing.
  if (std::error_code ec; !a.write_config.empty() && std::filesystem::is_directory(a.write_config, ec))
    fail("--write-config {} is a directory: name the run config to write, e.g. {}/plan.toml",
         a.write_config, a.write_config);
  const RunConfig base = base_config(a);
  const BatchLimit limit = batch_limit(a, base.model.seq_len);
  const Axes axes = axes_of(a, base, limit);
  SearchSpace space = space_of(a);
  const Objective objective =
      a.objective.empty() ? Objective::step : parse_name<Objective>(a.objective, "--objective");
  Workload first = workload_of(base);
  if (!a.attention.empty())
    first.attention = parse_name<AttentionKernel>(a.attention, "--attention");
  if (!a.pipeline_p2p.empty())
    first.p2p = parse_name<PipelineP2p>(a.pipeline_p2p, "--pipeline-p2p");
  const Device device = a.device.empty() ? Device::cpu : parse_name<Device>(a.device, "--device");
  first.global_batch = axes.global_batch.front();
  first.precision = axes.precision.front();
  ChosenCluster chosen = choose_cluster(a.cluster, device, a.ranks, first);
  if (!a.write_config.empty() && !chosen.spec.train_device)
    fail("--write-config: kintsugi does not train on the devices of cluster {} ({} names no "
         "device.train_device), so a run config for it would not run: plan without "
         "--write-config",
         chosen.spec.name, chosen.spec.source);
  // Grids train on both devices (docs/parallelism.md), so they join the search unasked for this
  // machine and on a spec tune refit (tune measures grids like 1D layouts, so plan -> tune ->
  // plan closes over the same space). On another cluster spec they are asked for with
  // --tensor-grid: the grid's cost terms were compared with measured runs on this machine's
  // CPUs only (docs/benchmarks.md), never on a cluster a spec describes.
  const bool grids_measured = a.cluster == "local" || chosen.spec.refit_layouts > 0;
  if (space.grids && a.tensor_grid.empty() && !grids_measured) {
    space.grids = false;
    chosen.notes.push_back("3D tensor grids not searched on a cluster spec unless asked: "
                           "--tensor-grid none any searches both (docs/planner.md)");
  }
  if (!a.scaling.empty()) return run_scaling(a, base, axes, space, first, chosen);
  const ClusterSpec& cluster = chosen.spec;
  if (objective == Objective::energy && !cluster.has_power())
    fail("--objective energy: cluster {} has no [power] section, so its energy is unknown (add "
         "`[power] active_watts = ...` to the spec, docs/planner.md)",
         cluster.name);
  const double tokens = token_budget(a, base.model);

  // Every (nodes, global batch, precision): its layouts, predicted.
  std::vector<Candidate> candidates, too_big;
  std::int64_t enumerated = 0, fitting = 0, searched = 0;
  std::vector<std::int64_t> batches_seen;
  for (std::int64_t nodes : axes.nodes) {
    const std::int64_t world = cluster.devices_per_node * nodes;
    const std::vector<std::int64_t> batches =
        !space.grad_accum.empty() && a.global_batch.empty()
            ? batches_from_accumulation(space, world, limit)
            : axes.global_batch;
    for (std::int64_t batch : batches) {
      if (std::find(batches_seen.begin(), batches_seen.end(), batch) == batches_seen.end())
        batches_seen.push_back(batch);
      for (Precision precision : axes.precision) {
        Workload w = first;
        w.global_batch = batch;
        w.precision = precision;
        SearchResult r = search_layouts(w, cluster, world, space);
        ++searched;
        enumerated += r.enumerated;
        fitting += r.fitting;
        for (Prediction& p : r.ranked) candidates.push_back({nodes, w, std::move(p)});
        for (Prediction& p : r.too_big) too_big.push_back({nodes, w, std::move(p)});
      }
    }
  }
  std::sort(batches_seen.begin(), batches_seen.end());
  rank_candidates(candidates, objective, cluster);
  std::stable_sort(too_big.begin(), too_big.end(), [](const Candidate& x, const Candidate& y) {
    return x.prediction.memory.total() < y.prediction.memory.total();
  });
  if (too_big.size() > 5) too_big.resize(5);
  const bool several = searched > 1;
  const std::vector<std::size_t> front =
      several ? pareto_front(candidates, cluster) : std::vector<std::size_t>{};
  const auto shown = static_cast<std::size_t>(a.top);  // --top: at least 1
  const ReportOptions report{.tokens = tokens,
                             .show_nodes = axes.nodes.size() > 1,
                             .show_batch = batches_seen.size() > 1,
                             .show_precision = axes.precision.size() > 1,
                             .wide = a.wide};
  // A cluster `tune` refit carries its error on the steps it measured: the layouts predicted
  // within it of the best cannot be ordered by the model (plan/refit.hpp) and tie with it.
  std::size_t ties = 0;
  if (cluster.refit_layouts > 0 && objective == Objective::step && !several)
    while (ties + 1 < candidates.size() &&
           within_refit_error(candidates.front().prediction.time.total(),
                              candidates[ties + 1].prediction.time.total(), cluster.refit_error))
      ++ties;
  const std::string tie_note =
      ties == 0 ? ""
                : fmt::format("#1-#{} tie: their predictions are within the refit's error of "
                              "#1's (+-{:.1f}%, [refit] of {}, from {} measured layouts), so the "
                              "model cannot order them; measure them to choose (kintsugi tune "
                              "runs the top layouts)",
                              ties + 1, 100 * cluster.refit_error, cluster.source,
                              cluster.refit_layouts);

  if (a.json) {
    nlohmann::json j = {{"model", base.model.name},
                        {"cluster", cluster.name},
                        {"seq", first.model.seq_len},
                        {"objective", std::string(name_of(objective))},
                        {"enumerated", enumerated},
                        {"fitting", fitting},
                        {"layouts", nlohmann::json::array()}};
    // One value as before; a list where the search spanned several.
    if (axes.nodes.size() == 1) {
      j["world"] = cluster.devices_per_node * axes.nodes.front();
      j["nodes"] = axes.nodes.front();
    } else {
      j["nodes"] = axes.nodes;
    }
    if (batches_seen.size() == 1) j["global_batch"] = batches_seen.front();
    else j["global_batch"] = batches_seen;
    if (axes.precision.size() == 1) {
      j["precision"] = std::string(name_of(axes.precision.front()));
    } else {
      j["precision"] = nlohmann::json::array();
      for (Precision p : axes.precision) j["precision"].push_back(std::string(name_of(p)));
    }
    if (tokens > 0) j["campaign"] = campaign_assumptions_json(base.model, first.model.seq_len, tokens, cluster);
    if (limit.critical_sequences > 0)
      j["critical_batch"] = {{"loss", a.critical_batch_loss},
                             {"tokens", limit.critical_tokens},
                             {"sequences", limit.critical_sequences},
                             {"max_global_batch", limit.sequences},
                             {"source", "Kaplan et al. 2020, Eq. 1.4"}};
    if (!candidates.empty())
      if (const auto r = rampup_for(a, candidates.front()))
        j["batch_rampup"] = {r->start, r->increment, r->samples};
    if (!chosen.notes.empty()) j["cluster_notes"] = chosen.notes;
    for (std::size_t i = 0; i < std::min(shown, candidates.size()); ++i) {
      j["layouts"].push_back(to_json(candidates[i], cluster, report));
      if (cluster.refit_layouts > 0) j["layouts"].back()["ties_with_best"] = i <= ties;
    }
    if (cluster.refit_layouts > 0) {
      j["refit_error"] = cluster.refit_error;
      j["tied_with_best"] = ties;  // how many layouts after #1 tie with it
    }
    if (several) {
      j["pareto_front"] = nlohmann::json::array();
      for (std::size_t i : front) {
        j["pareto_front"].push_back(to_json(candidates[i], cluster, report));
        j["pareto_front"].back()["rank"] = i + 1;
      }
    }
    // With nothing fitting (a pinned layout too large, say), the smallest are still predicted.
    if (candidates.empty()) {
      j["not_fitting"] = nlohmann::json::array();
      for (const Candidate& c : too_big) {
        j["not_fitting"].push_back(to_json(c, cluster, report));
        j["not_fitting"].back()["does_not_fit"] = does_not_fit(c.prediction, cluster);
      }
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    const double n = static_cast<double>(parameter_count(base.model));
    const std::string params =
        n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.2f}M", n / 1e6);
    std::string precisions;
    for (Precision p : axes.precision)
      precisions += (precisions.empty() ? "" : ",") + std::string(name_of(p));
    if (axes.nodes.size() == 1) {
      const std::int64_t world = cluster.devices_per_node * axes.nodes.front();
      fmt::print("{} ({} parameters) on {} x {} = {} devices of {} ({}), global batch {} x "
                 "seq {}, {}\n",
                 base.model.name, params, axes.nodes.front(), cluster.devices_per_node, world,
                 cluster.name, cluster.source, list_text(batches_seen), first.model.seq_len,
                 precisions);
    } else {
      fmt::print("{} ({} parameters) on {} nodes of {} devices of {} ({}), global batch {} x seq "
                 "{}, {}\n",
                 base.model.name, params, list_text(axes.nodes), cluster.devices_per_node,
                 cluster.name, cluster.source, list_text(batches_seen), first.model.seq_len,
                 precisions);
    }
    print_notes(chosen.notes);
    if (limit.critical_sequences > 0)
      fmt::print("note: {}\n", critical_batch_note(a, limit, first.model.seq_len));
    // Only a run described by flags alone takes the default; a config's value is the run's,
    // whether or not it equals the default.
    if (a.global_batch.empty() && a.grad_accum.empty() && a.config.empty())
      fmt::print("note: global batch {} sequences ({} tokens per step) is kintsugi's default, "
                 "not necessarily your run's: pass --global-batch (layouts and times depend on "
                 "it)\n",
                 first.global_batch, first.global_batch * first.model.seq_len);
    if (objective == Objective::step && batches_seen.size() > 1)
      fmt::print("note: ranked by step time, which favours the smaller global batches; "
                 "--objective time ranks by the time to train a token budget\n");
    if (tokens > 0) print_campaign_assumptions(base.model, first.model.seq_len, tokens, cluster);
    fmt::print("{} valid layouts, {} fit in {:.0f} GB per device{}\n\n", enumerated, fitting,
               cluster.memory_gb,
               several ? fmt::format(" ({} searches), ranked by {}", searched, name_of(objective))
                       : objective != Objective::step
                             ? fmt::format(", ranked by {}", name_of(objective))
                             : std::string());
    if (!candidates.empty()) print_candidate_table(candidates, shown, cluster, report);
    if (!tie_note.empty()) fmt::print("\nnote: {}\n", tie_note);
    if (several && !candidates.empty()) {
      std::vector<Candidate> on_front;
      for (std::size_t i : front) on_front.push_back(candidates[i]);
      fmt::print("\nPareto front ({} layouts: none is beaten by another in time per token,\n"
                 "devices{}; # is the rank above):\n",
                 front.size(), cluster.has_power() ? " and energy per token" : "");
      print_candidate_table(on_front, on_front.size(), cluster, report, front);
    }
    if (!candidates.empty() && a.rampup_tokens > 0) {
      const auto r = rampup_for(a, candidates.front());
      fmt::print("\nbatch ramp-up for #1: {}\n",
                 r ? rampup_text(*r, candidates.front(), a.rampup_tokens)
                   : fmt::format("none: global batch {} leaves no room below it for a ramp "
                                 "from 32K tokens in steps the layout can split",
                                 candidates.front().workload.global_batch));
    }
    if (candidates.empty() && !too_big.empty()) {
      fmt::print("none fits; the smallest, predicted anyway:\n");
      print_candidate_table(too_big, shown, cluster, report);
      for (std::size_t i = 0; i < std::min(shown, too_big.size()); ++i)
        fmt::print("{:>3} does not fit: {}\n", i + 1, does_not_fit(too_big[i].prediction, cluster));
    }
  }
  if (candidates.empty()) {
    if (too_big.empty())
      fail("no valid layout of {} on {} nodes of {} devices with global batch {}: change "
           "--nodes, --global-batch or the pinned dimensions",
           base.model.name, list_text(axes.nodes), cluster.devices_per_node,
           list_text(batches_seen));
    fail("no layout fits in {:.0f} GB per device (the smallest, {}, needs {:.1f} GB): add nodes "
         "or allow more sharding",
         cluster.memory_gb, describe(too_big.front().prediction.layout),
         too_big.front().prediction.memory.total() / 1e9);
  }
  if (!a.write_config.empty()) {
    const Candidate& best = candidates.front();
    const PlannedRun run =
        planned_run(base, a.config.empty() ? std::set<std::string>{} : given_keys(a.config, a.overrides),
                    best, cluster, tokens, rampup_for(a, best), a.write_config);
    data::write_text_file(a.write_config, run.toml);
    if (!a.json)
      fmt::print("\n{}{}\n", run.summary,
                 ties > 0 ? fmt::format(" (#2-#{} tie with it: note above)", ties + 1) : "");
  }
}

// An option that takes one whole number (--ranks, --seq), checked here so that a bad value gets
// one line naming the option: a comma-separated list is refused as such.
CLI::Option* one_number(CLI::App* cmd, const std::string& flag, std::int64_t& target,
                        std::int64_t minimum, const std::string& what) {
  auto parse = [flag, &target, minimum](const std::string& text) {
    if (text.find(',') != std::string::npos)
      fail("{} takes one value, not a list ({}): --nodes, --global-batch, --precision and the "
           "layout pins (--tp, --pp, ...) take lists; run plan once per value",
           flag, text);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value < minimum)
      fail("{} {} is not a whole number {}", flag, text,
           minimum > 0 ? "of at least 1" : "of at least 0");
    target = value;
  };
  return cmd->add_option_function<std::string>(flag, parse, what)
      ->type_name("INT")
      ->default_str(std::to_string(target));
}

// An option that takes one finite number above 0 (--tokens, --rampup-tokens, ...). 0 stands for
// "not given" in PlanArgs, so a 0, a negative, nan or inf written on the command line is refused by
// name, never taken as no value.
CLI::Option* positive_number(CLI::App* cmd, const std::string& flag, double& target,
                             const std::string& what) {
  auto parse = [flag, &target](const std::string& text) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size())
      fail("{} '{}' is not a number", flag, text);
    if (!std::isfinite(value) || !(value > 0))
      fail("{} {} must be a finite number above 0 (leave the flag out for none)", flag, text);
    target = value;
  };
  return cmd->add_option_function<std::string>(flag, parse, what)->type_name("NUMBER");
}

// An option whose empty value would read as "not given" in PlanArgs (--global-batch '' as the
// default batch, --model '' as gpt-tiny): an empty value is refused by name (cli/text_option.hpp).
CLI::Option* text_option(CLI::App* cmd, const std::string& flag, std::string& target,
                         const std::string& what) {
  return add_text_option(*cmd, flag, target, what);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan", "Predict memory and step time of every valid layout on a cluster; print the best");
  text_option(cmd, "--model", a->model, "Model preset (gpt-tiny, llama-13b, bloom-13b, gpt-175b, ...)");
  text_option(cmd, "--config,-c", a->config, "Or a run config (TOML) for the model and batch");
  cmd->add_option("--set", a->overrides, "Override a --config key, e.g. --set model.n_layer=4");
  text_option(cmd, "--cluster", a->cluster,
                  "Cluster: dgx-a100-80gb, dgx-h100, frontier, gaudi2, perlmutter, local, or a TOML file")
      ->default_str("local");
  text_option(cmd, "--nodes", a->nodes,
                  "Nodes: one count, a list (12,16) or a range (8:64:x2, 8:64:8; "
                  "docs/planner.md)")
      ->default_str("1");
  one_number(cmd, "--ranks", a->ranks, 0,
             "local cluster: ranks sharing this machine (default: cores; with --device "
             "cuda: visible GPUs)");
  cmd->add_option("--device", a->device,
                  "local cluster: what each rank computes on: cpu (default: cores shared by the "
                  "ranks) or cuda (a GPU per rank, measured: GEMM curve, attention rate, memory "
                  "and its bandwidth; docs/planner.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  text_option(cmd, "--global-batch", a->global_batch,
                  "Sequences per optimizer step: one, a list or a range")
      ->default_str("the config's, else 16");
  one_number(cmd, "--max-global-batch", a->max_global_batch, 0,
             "Largest global batch the search may use (convergence; 0: no limit)");
  one_number(cmd, "--max-nodes", a->max_nodes, 0, "Most nodes the search may use (0: no limit)");
  positive_number(cmd, "--critical-batch-loss",
                  a->critical_batch_loss,
                  "Also limit the global batch to the critical batch at this loss (nats/token): "
                  "B_crit = 2e8 / L^(1/0.21) tokens (Kaplan et al. 2020; docs/planner.md)");
  positive_number(cmd, "--rampup-tokens", a->rampup_tokens,
                  "Suggest a batch ramp-up for the best layout from 32K tokens over this many "
                  "tokens (GPT-3 ramped over 4e9-12e9; written by --write-config)");
  positive_number(cmd, "--tokens", a->tokens,
                  "Token budget of the campaign (e.g. 3.5e12): days, device- and node-hours, "
                  "model FLOPs and energy per layout");
  positive_number(cmd, "--tokens-per-param", a->tokens_per_param,
                  "Or the budget in tokens per parameter (20: the compute-optimal rule the "
                  "Frontier study's energy estimates take)");
  cmd->add_option("--scaling", a->scaling,
                  "Scaling curve over --nodes (two or more): strong (the global batch fixed) or "
                  "weak (the batch grows with the nodes)")
      ->check(CLI::IsMember({"strong", "weak"}));
  text_option(cmd, "--plot", a->plot, "With --scaling: write the efficiency curve as an SVG");
  cmd->add_option("--objective", a->objective,
                  "Rank by: step (time per step, default), time (to train a token budget), "
                  "energy, device-hours")
      ->check(CLI::IsMember({"step", "time", "energy", "device-hours"}));
  // 0 stands for "not given" in PlanArgs (the model's value), so a 0 written on the command line is
  // refused rather than silently taken as the default.
  one_number(cmd, "--seq", a->seq, 1, "Sequence length")->default_str("the model's");
  cmd->add_option("--precision", a->precision,
                  "fp32, bf16 or fp16, or a list (default: bf16 for presets)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--grad-precision", a->grad_precision, "fp32 or param")
      ->check(CLI::IsMember({"fp32", "param"}));
  one_number(cmd, "--top", a->top, 1, "Layouts to print");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->add_flag("--wide", a->wide,
                "Every column of the table (the step's breakdown, samples/s, HFU, hours, joules) "
                "and every layout, one per row; by default it keeps within 100 columns and "
                "layouts with the same figures share a row");
  text_option(cmd, "--write-config", a->write_config, "Write the best layout as a run config");
  cmd->add_flag("--memory", a->memory,
                "Only the training state's memory (bytes per parameter; Korthikanti et al.'s 22B/175B/1T "
                "table without --model)");
  // Every pin takes one value or a comma-separated list of the values to try; the numeric
  // pins also ranges (plan/value_list.hpp).
  auto pin = [cmd](const char* flag, auto& target, const char* what) {
    return cmd->add_option(flag, target, what)->delimiter(',');
  };
  auto number_pin = [cmd](const char* flag, std::string& target, const char* what) {
    return text_option(cmd, flag, target, what);
  };
  add_layout_pins(*cmd, a->pins,
                  {"parallel.tp", "parallel.pp", "parallel.dp", "parallel.virtual_stages",
                   "parallel.zero", "parallel.hsdp", "parallel.schedule",
                   "parallel.sequence_parallel", "parallel.tensor_grid_overlap"});
  number_pin("--micro-batch", a->micro_batch, "Pin the micro-batch (one, a list or a range: 4:20)");
  number_pin("--grad-accum", a->grad_accum,
             "Pin micro-batches per replica and step (gradient accumulation); without "
             "--global-batch the batches are micro-batch x accumulation x dp");
  pin("--recompute", a->recompute, "Pin recomputation: none, selective, full (one or a list)");
  cmd->add_option(flag_of("parallel.tensor_grid"), a->tensor_grid,
                  "Pin 3D tensor parallelism (docs/parallelism.md): none (1D only), any (grids "
                  "only) or grids X,Y,Z, one or several (--tensor-grid none any: both); a grid "
                  "named may span nodes. Default: 1D, and on the local cluster (either device) "
                  "or a spec tune refit also every grid inside a node")
      ->expected(1, -1);
  cmd->add_option("--attention", a->attention,
                  "Attention kernel of the predicted run: flash (kintsugi's, default) or "
                  "materialized (s x s scores in memory, as Megatron-LM's fused softmax)")
      ->check(CLI::IsMember({"flash", "materialized"}));
  cmd->add_option("--pipeline-p2p", a->pipeline_p2p,
                  "Pipeline transfers of the predicted run: async (kintsugi's, default: receives "
                  "overlap compute) or blocking (DeepSpeed's pipeline engine: every send and "
                  "receive in turn)")
      ->check(CLI::IsMember({"async", "blocking"}));
  cmd->add_flag("--tp-across-nodes", a->tp_across_nodes,
                "Also try tensor parallelism (1D and grids) across nodes");
  cmd->callback([a, cmd] {
    // --memory answers from the model and precisions alone: any other flag would be ignored.
    if (a->memory)
      for (const CLI::Option* o : cmd->get_options())
        if (o->count() > 0 && !o->check_name("--memory") && !o->check_name("--model") &&
            !o->check_name("--precision") && !o->check_name("--grad-precision"))
          fail("plan --memory takes only --model, --precision and --grad-precision, not {}: "
               "the training state per parameter depends on nothing else",
               o->get_name());
    run_plan(*a);
  });
}

}  // namespace kintsugi::cli
