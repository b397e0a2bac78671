#include "kintsugi/cli/plan_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/plan/value_list.hpp"
#include "kintsugi/train/layout_config.hpp"

namespace kintsugi::cli {

namespace {

// Checked before any work: a --plot without a curve, and a --write-config path that is a
// directory (it would be reported written and hold nothing).
void check_outputs(const PlanArgs& a) {
  if (!a.plot.empty() && a.scaling.empty())
    fail("--plot {} draws a --scaling curve: add --scaling strong or weak", a.plot);
  if (std::error_code ec;
      !a.write_config.empty() && std::filesystem::is_directory(a.write_config, ec))
    fail("--write-config {} is a directory: name the run config to write, e.g. {}/plan.toml",
         a.write_config, a.write_config);
}

// The run: a run config (--config, gpt2 models that train here) or a preset (--model, any
// family), with --seq and --grad-precision applied.
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

// Node counts, global batches and precisions, each a list or range, within --max-nodes and the
// batch limit (--max-global-batch, --critical-batch-loss); the batches and precision default to
// the run's.
CampaignAxes axes_of(const PlanArgs& a, const RunConfig& base) {
  CampaignAxes x;
  x.limit = batch_limit(a.max_global_batch, a.critical_batch_loss, base.model.seq_len);
  for (std::int64_t n : parse_values(a.nodes, "--nodes", 1))
    if (a.max_nodes == 0 || n <= a.max_nodes) x.nodes.push_back(n);
  if (x.nodes.empty()) fail("no --nodes value {} is within --max-nodes {}", a.nodes, a.max_nodes);
  const std::vector<std::int64_t> batches =
      a.global_batch.empty() ? std::vector<std::int64_t>{base.train.global_batch}
                             : parse_values(a.global_batch, "--global-batch", 1);
  for (std::int64_t b : batches)
    if (x.limit.allows(b)) x.global_batch.push_back(b);
  if (x.global_batch.empty())
    fail("no global batch ({}{}) is within {}: the largest the model's convergence allows, a "
         "limit the search keeps",
         a.global_batch.empty() ? "the config's " : "--global-batch ", list_text(batches),
         batch_limit_source(a, x.limit, base.model.seq_len));
  for (const auto& p : a.precision) x.precision.push_back(parse_name<Precision>(p, "--precision"));
  if (x.precision.empty()) x.precision.push_back(base.train.precision);
  return x;
}

SearchSpace space_of(const PlanArgs& a) {
  SearchSpace space;
  auto values = [](const std::string& text, const char* flag, std::int64_t minimum) {
    return text.empty() ? std::vector<std::int64_t>{} : parse_values(text, flag, minimum);
  };
  space.pins = layout_pins(a.pins);
  space.micro_batch = values(a.micro_batch, "--micro-batch", 1);
  space.grad_accum = values(a.grad_accum, "--grad-accum", 1);
  for (const auto& v : a.recompute)
    space.recompute.push_back(parse_name<Recompute>(v, "--recompute"));
  space.tp_across_nodes = a.tp_across_nodes;
  // A study's search space states micro-batch and gradient accumulation, not the global batch
  // (Table V of Dash et al.): the micro-batch must then be bounded by the list, not by 64.
  if (!space.micro_batch.empty())
    space.max_micro_batch = *std::max_element(space.micro_batch.begin(), space.micro_batch.end());
  return space;
}

// The run's workload at the axes' first global batch and precision, with --attention and
// --pipeline-p2p.
Workload first_workload(const PlanArgs& a, const RunConfig& base, const CampaignAxes& axes) {
  Workload first = workload_of(base);
  if (!a.attention.empty())
    first.attention = parse_name<AttentionKernel>(a.attention, "--attention");
  if (!a.pipeline_p2p.empty())
    first.p2p = parse_name<PipelineP2p>(a.pipeline_p2p, "--pipeline-p2p");
  first.global_batch = axes.global_batch.front();
  first.precision = axes.precision.front();
  return first;
}

// The cluster --cluster names (the local one measured for `first`), checked against
// --write-config, and which dimensions join the search there.
ChosenCluster cluster_of(const PlanArgs& a, const Workload& first, SearchSpace& space) {
  const Device device = a.device.empty() ? Device::cpu : parse_name<Device>(a.device, "--device");
  ChosenCluster chosen = choose_cluster(a.cluster, device, a.ranks, first);
  if (!a.write_config.empty() && !chosen.spec.train_device)
    fail("--write-config: kintsugi does not train on the devices of cluster {} ({} names no "
         "device.train_device), so a run config for it would not run: plan without "
         "--write-config",
         chosen.spec.name, chosen.spec.source);
  // Every dimension trains on both devices (docs/parallelism.md), so each joins the search
  // unasked for this machine and on a spec tune refit (tune measures every layout, so plan ->
  // tune -> plan closes over the same space); on another cluster spec, a dimension whose cost
  // terms were compared with measured runs on this machine only is searched where pinned.
  const bool measured = a.cluster == "local" || chosen.spec.refit_layouts > 0;
  for (std::string& note : pin_unmeasured_dimensions(space.pins, measured))
    chosen.notes.push_back(std::move(note));
  return chosen;
}

}  // namespace

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string out;
  for (std::int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::string batch_limit_source(const PlanArgs& a, const BatchLimit& limit,
                               std::int64_t seq_len) {
  if (!limit.critical_sets_it) return fmt::format("--max-global-batch {}", a.max_global_batch);
  return fmt::format("--critical-batch-loss {} (its critical batch, {:.4g} tokens = {} "
                     "sequences of {})",
                     a.critical_batch_loss, limit.critical_tokens, limit.critical_sequences,
                     seq_len);
}

PlanInputs read_plan_inputs(const PlanArgs& a) {
  check_outputs(a);
  PlanInputs in;
  in.base = base_config(a);
  in.axes = axes_of(a, in.base);
  in.space = space_of(a);
  in.axes.batches_from_accumulation = !in.space.grad_accum.empty() && a.global_batch.empty();
  in.objective =
      a.objective.empty() ? Objective::step : parse_name<Objective>(a.objective, "--objective");
  in.first = first_workload(a, in.base, in.axes);
  in.chosen = cluster_of(a, in.first, in.space);
  return in;
}

double token_budget(const PlanArgs& a, const ModelConfig& model) {
  if (a.tokens > 0 && a.tokens_per_param > 0)
    fail("plan takes --tokens or --tokens-per-param, not both");
  if (a.tokens_per_param > 0)
    return a.tokens_per_param * static_cast<double>(parameter_count(model));
  return a.tokens;
}

}  // namespace kintsugi::cli
