// `kintsugi plan`: predict memory and step time of every valid layout of a model on a cluster
// and print the best (plan/cost_model.hpp, plan/search.hpp); `--memory` alone answers how much
// memory a model's training state needs.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/plan_args.hpp"
#include "kintsugi/cli/plan_run_config.hpp"
#include "kintsugi/cli/plan_scaling.hpp"
#include "kintsugi/cli/plan_summary.hpp"
#include "kintsugi/cli/text_option.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/memory.hpp"

namespace kintsugi::cli {

namespace {

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
             precision, grads == GradPrecision::param ? precision : Precision::fp32,
             per.parameters, per.gradients, per.optimizer_state,
             mixed ? "f32 master weights and two f32 moments" : "two f32 moments",
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

// Nothing fits or nothing is valid: the search's failure, after its report.
[[noreturn]] void fail_without_layout(const PlanInputs& in, const CampaignSearch& found) {
  const ClusterSpec& cluster = in.chosen.spec;
  if (found.too_big.empty())
    fail("no valid layout of {} on {} nodes of {} devices with global batch {}: change "
         "--nodes, --global-batch or the pinned dimensions",
         in.base.model.name, list_text(in.axes.nodes), cluster.devices_per_node,
         list_text(found.global_batches));
  fail("no layout fits in {:.0f} GB per device (the smallest, {}, needs {:.1f} GB): add nodes "
       "or allow more sharding",
       cluster.memory_gb, describe(found.too_big.front().prediction.layout),
       found.too_big.front().prediction.memory.total() / 1e9);
}

// --write-config: the best layout as a run config (cli/plan_run_config.hpp).
void write_best_config(const PlanArgs& a, const PlanInputs& in, const CampaignSearch& found,
                       double tokens) {
  const Candidate& best = found.candidates.front();
  const std::set<std::string> given =
      a.config.empty() ? std::set<std::string>{} : given_keys(a.config, a.overrides);
  const PlannedRun run = planned_run(in.base, given, best, in.chosen.spec, tokens,
                                     rampup_for(a, best), a.write_config);
  data::write_text_file(a.write_config, run.toml);
  if (!a.json)
    fmt::print("\n{}{}\n", run.summary,
               found.tied_with_best > 0
                   ? fmt::format(" (#2-#{} tie with it: note above)", found.tied_with_best + 1)
                   : "");
}

// The search's own checks, past --scaling's branch: a known energy for --objective energy, one
// token budget (returned), micro-batches for the batches accumulation makes.
double check_search_flags(const PlanArgs& a, const PlanInputs& in) {
  if (in.objective == Objective::energy && !in.chosen.spec.has_power())
    fail("--objective energy: cluster {} has no [power] section, so its energy is unknown (add "
         "`[power] active_watts = ...` to the spec, docs/planner.md)",
         in.chosen.spec.name);
  const double tokens = token_budget(a, in.base.model);
  if (in.axes.batches_from_accumulation && in.space.micro_batch.empty())
    fail("--grad-accum without --global-batch needs --micro-batch: the global batch is "
         "micro-batch x accumulation x dp");
  return tokens;
}

void run_plan(const PlanArgs& a) {
  if (a.memory) return print_memory(a);
  const PlanInputs in = read_plan_inputs(a);
  if (!a.scaling.empty()) return run_scaling(a, in);
  const double tokens = check_search_flags(a, in);
  const CampaignSearch found =
      search_campaign(in.first, in.chosen.spec, in.axes, in.space, in.objective);
  if (a.json) print_search_json(a, in, found, tokens);
  else print_search_text(a, in, found, tokens);
  if (found.candidates.empty()) fail_without_layout(in, found);
  if (!a.write_config.empty()) write_best_config(a, in, found, tokens);
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

// What is planned, and where: the model or run config, the cluster, its nodes and ranks.
void add_run_flags(CLI::App* cmd, PlanArgs& a) {
  text_option(cmd, "--model", a.model,
              "Model preset (gpt-tiny, llama-13b, bloom-13b, gpt-175b, ...)");
  text_option(cmd, "--config,-c", a.config, "Or a run config (TOML) for the model and batch");
  cmd->add_option("--set", a.overrides, "Override a --config key, e.g. --set model.n_layer=4");
  text_option(cmd, "--cluster", a.cluster,
              "Cluster: dgx-a100-80gb, dgx-h100, frontier, gaudi2, perlmutter, local, or a "
              "TOML file")
      ->default_str("local");
  text_option(cmd, "--nodes", a.nodes,
              "Nodes: one count, a list (12,16) or a range (8:64:x2, 8:64:8; docs/planner.md)")
      ->default_str("1");
  one_number(cmd, "--ranks", a.ranks, 0,
             "local cluster: ranks sharing this machine (default: cores; with --device "
             "cuda: visible GPUs)");
  cmd->add_option("--device", a.device,
                  "local cluster: what each rank computes on: cpu (default: cores shared by the "
                  "ranks) or cuda (a GPU per rank, measured: GEMM curve, attention rate, memory "
                  "and its bandwidth; docs/planner.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

// The campaign: its global batches and their limits, the token budget, the ramp-up, the
// scaling curve and what the layouts are ranked by.
void add_campaign_flags(CLI::App* cmd, PlanArgs& a) {
  text_option(cmd, "--global-batch", a.global_batch,
              "Sequences per optimizer step: one, a list or a range")
      ->default_str("the config's, else 16");
  one_number(cmd, "--max-global-batch", a.max_global_batch, 0,
             "Largest global batch the search may use (convergence; 0: no limit)");
  one_number(cmd, "--max-nodes", a.max_nodes, 0, "Most nodes the search may use (0: no limit)");
  positive_number(cmd, "--critical-batch-loss", a.critical_batch_loss,
                  "Also limit the global batch to the critical batch at this loss (nats/token): "
                  "B_crit = 2e8 / L^(1/0.21) tokens (Kaplan et al. 2020; docs/planner.md)");
  positive_number(cmd, "--rampup-tokens", a.rampup_tokens,
                  "Suggest a batch ramp-up for the best layout from 32K tokens over this many "
                  "tokens (GPT-3 ramped over 4e9-12e9; written by --write-config)");
  positive_number(cmd, "--tokens", a.tokens,
                  "Token budget of the campaign (e.g. 3.5e12): days, device- and node-hours, "
                  "model FLOPs and energy per layout");
  positive_number(cmd, "--tokens-per-param", a.tokens_per_param,
                  "Or the budget in tokens per parameter (20: the compute-optimal rule the "
                  "Frontier study's energy estimates take)");
  cmd->add_option("--scaling", a.scaling,
                  "Scaling curve over --nodes (two or more): strong (the global batch fixed) or "
                  "weak (the batch grows with the nodes)")
      ->check(CLI::IsMember({"strong", "weak"}));
  text_option(cmd, "--plot", a.plot, "With --scaling: write the efficiency curve as an SVG");
  cmd->add_option("--objective", a.objective,
                  "Rank by: step (time per step, default), time (to train a token budget), "
                  "energy, device-hours")
      ->check(CLI::IsMember({"step", "time", "energy", "device-hours"}));
}

// The run's sequence and precisions, then what is printed or written.
void add_precision_and_output_flags(CLI::App* cmd, PlanArgs& a) {
  // 0 stands for "not given" in PlanArgs (the model's value), so a 0 written on the command
  // line is refused rather than silently taken as the default.
  one_number(cmd, "--seq", a.seq, 1, "Sequence length")->default_str("the model's");
  cmd->add_option("--precision", a.precision,
                  "fp32, bf16 or fp16, or a list (default: bf16 for presets)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--grad-precision", a.grad_precision, "fp32 or param")
      ->check(CLI::IsMember({"fp32", "param"}));
  one_number(cmd, "--top", a.top, 1, "Layouts to print");
  cmd->add_flag("--json", a.json, "Print JSON");
  cmd->add_flag("--wide", a.wide,
                "Every column of the table (the step's breakdown, samples/s, HFU, hours, joules) "
                "and every layout, one per row; by default it keeps within 100 columns and "
                "layouts with the same figures share a row");
  text_option(cmd, "--write-config", a.write_config, "Write the best layout as a run config");
  cmd->add_flag("--memory", a.memory,
                "Only the training state's memory (bytes per parameter; Korthikanti et al.'s "
                "22B/175B/1T table without --model)");
}

// The layout pins and the predicted run's kernels.
void add_pin_flags(CLI::App* cmd, PlanArgs& a) {
  // Every pin takes one value or a comma-separated list of the values to try; the numeric
  // pins also ranges (plan/value_list.hpp).
  auto pin = [cmd](const char* flag, auto& target, const char* what) {
    return cmd->add_option(flag, target, what)->delimiter(',');
  };
  auto number_pin = [cmd](const char* flag, std::string& target, const char* what) {
    return text_option(cmd, flag, target, what);
  };
  add_layout_pins(*cmd, a.pins, pinnable_keys());
  number_pin("--micro-batch", a.micro_batch, "Pin the micro-batch (one, a list or a range: 4:20)");
  number_pin("--grad-accum", a.grad_accum,
             "Pin micro-batches per replica and step (gradient accumulation); without "
             "--global-batch the batches are micro-batch x accumulation x dp");
  pin("--recompute", a.recompute, "Pin recomputation: none, selective, full (one or a list)");
  cmd->add_option("--attention", a.attention,
                  "Attention kernel of the predicted run: flash (kintsugi's, default) or "
                  "materialized (s x s scores in memory, as Megatron-LM's fused softmax)")
      ->check(CLI::IsMember({"flash", "materialized"}));
  cmd->add_option("--pipeline-p2p", a.pipeline_p2p,
                  "Pipeline transfers of the predicted run: async (kintsugi's, default: receives "
                  "overlap compute) or blocking (DeepSpeed's pipeline engine: every send and "
                  "receive in turn)")
      ->check(CLI::IsMember({"async", "blocking"}));
  cmd->add_flag("--tp-across-nodes", a.tp_across_nodes,
                "Also try tensor parallelism (1D and grids) across nodes");
}

// --memory answers from the model and precisions alone: any other flag would be ignored.
void check_memory_flags(const CLI::App* cmd) {
  for (const CLI::Option* o : cmd->get_options())
    if (o->count() > 0 && !o->check_name("--memory") && !o->check_name("--model") &&
        !o->check_name("--precision") && !o->check_name("--grad-precision"))
      fail("plan --memory takes only --model, --precision and --grad-precision, not {}: "
           "the training state per parameter depends on nothing else",
           o->get_name());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan", "Predict memory and step time of every valid layout on a cluster; print the best");
  add_run_flags(cmd, *a);
  add_campaign_flags(cmd, *a);
  add_precision_and_output_flags(cmd, *a);
  add_pin_flags(cmd, *a);
  cmd->callback([a, cmd] {
    if (a->memory) check_memory_flags(cmd);
    run_plan(*a);
  });
}

}  // namespace kintsugi::cli
