// `kintsugi plan`: predict memory and step time of every valid layout of a model on a cluster
// and print the best (plan/cost_model.hpp, plan/search.hpp); `--memory` alone answers how much
// memory a model's training state needs.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>

#include "kintsugi/cli/cluster_choice.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/plan_report.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/plan/memory.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi::cli {

namespace {

struct Args {
  std::string model, config, cluster = "local", precision, grad_precision, write_config;
  std::string attention, device;
  std::vector<std::string> overrides, schedule, recompute, sp;
  std::int64_t nodes = 1, ranks = 0, global_batch = 0, seq = 0;
  std::size_t top = 10;
  std::vector<std::int64_t> tp, pp, dp, micro_batch, zero, virtual_stages, hsdp;
  bool json = false, memory = false, tp_across_nodes = false;
};

// The run the plan is for: a run config (--config, gpt2 models that train here) or a preset
// (--model, any family), with --seq, --global-batch and --precision applied.
RunConfig base_config(const Args& a) {
  RunConfig c;
  if (a.ranks > 0 && a.cluster != "local")
    fail("--ranks sets the local cluster's ranks; for --cluster {} use --nodes", a.cluster);
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
  if (a.global_batch > 0) c.train.global_batch = a.global_batch;
  if (!a.precision.empty()) c.train.precision = parse_name<Precision>(a.precision, "--precision");
  if (!a.grad_precision.empty())
    c.train.grad_precision = parse_name<GradPrecision>(a.grad_precision, "--grad-precision");
  validate(c.model);
  return c;
}

void print_memory(const Args& a) {
  // Bytes per parameter of the training state (plan/memory.hpp), without sharding.
  const Precision precision =
      a.precision.empty() ? Precision::bf16 : parse_name<Precision>(a.precision, "--precision");
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

void run_plan(const Args& a) {
  if (a.memory) return print_memory(a);
  if (std::error_code ec; !a.write_config.empty() && std::filesystem::is_directory(a.write_config, ec))
    fail("--write-config {} is a directory: name the run config to write, e.g. {}/plan.toml",
         a.write_config, a.write_config);
  const RunConfig base = base_config(a);
  Workload w = workload_of(base);
  if (!a.attention.empty()) w.attention = parse_name<AttentionKernel>(a.attention, "--attention");
  const Device device = a.device.empty() ? Device::cpu : parse_name<Device>(a.device, "--device");
  const ChosenCluster chosen = choose_cluster(a.cluster, device, a.ranks, w);
  const ClusterSpec& cluster = chosen.spec;
  const std::int64_t world = cluster.devices_per_node * a.nodes;
  SearchSpace space;
  space.tp = a.tp;
  space.pp = a.pp;
  space.dp = a.dp;
  space.micro_batch = a.micro_batch;
  for (std::int64_t z : a.zero) space.zero.push_back(zero_stage(z, "--zero"));
  space.hsdp = a.hsdp;
  space.virtual_stages = a.virtual_stages;
  for (const auto& v : a.schedule)
    space.schedule.push_back(parse_name<PipelineSchedule>(v, "--schedule"));
  for (const auto& v : a.recompute)
    space.recompute.push_back(parse_name<Recompute>(v, "--recompute"));
  for (const auto& v : a.sp) space.sequence_parallel.push_back(v == "on");
  space.tp_across_nodes = a.tp_across_nodes;
  const SearchResult r = search_layouts(w, cluster, world, space);
  if (a.json) {
    nlohmann::json j = {{"model", base.model.name},
                        {"cluster", cluster.name},
                        {"world", world},
                        {"nodes", a.nodes},
                        {"global_batch", w.global_batch},
                        {"seq", w.model.seq_len},
                        {"precision", name_of(w.precision)},
                        {"enumerated", r.enumerated},
                        {"fitting", r.fitting},
                        {"layouts", nlohmann::json::array()}};
    if (!chosen.notes.empty()) j["cluster_notes"] = chosen.notes;
    for (std::size_t i = 0; i < std::min(a.top, r.ranked.size()); ++i)
      j["layouts"].push_back(to_json(r.ranked[i]));
    // With nothing fitting (a pinned layout too large, say), the smallest are still predicted.
    if (r.ranked.empty()) {
      j["not_fitting"] = nlohmann::json::array();
      for (const Prediction& p : r.too_big) {
        j["not_fitting"].push_back(to_json(p));
        j["not_fitting"].back()["does_not_fit"] = does_not_fit(p, cluster);
      }
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    const double n = static_cast<double>(parameter_count(base.model));
    fmt::print("{} ({} parameters) on {} x {} = {} devices of {} ({}), global batch {} x "
               "seq {}, {}\n",
               base.model.name,
               n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.2f}M", n / 1e6), a.nodes,
               cluster.devices_per_node, world, cluster.name, cluster.source, w.global_batch,
               w.model.seq_len, w.precision);
    print_notes(chosen.notes);
    // Only a run described by flags alone takes the default; a config's value is the run's,
    // whether or not it equals the default.
    if (a.global_batch == 0 && a.config.empty())
      fmt::print("note: global batch {} sequences ({} tokens per step) is kintsugi's default, "
                 "not necessarily your run's: pass --global-batch (layouts and times depend on "
                 "it)\n",
                 w.global_batch, w.global_batch * w.model.seq_len);
    fmt::print("{} valid layouts, {} fit in {:.0f} GB per device\n\n", r.enumerated, r.fitting,
               cluster.memory_gb);
    if (!r.ranked.empty()) print_prediction_table(r.ranked, a.top);
    if (r.ranked.empty() && !r.too_big.empty()) {
      fmt::print("none fits; the smallest, predicted anyway:\n");
      print_prediction_table(r.too_big, a.top);
      for (std::size_t i = 0; i < std::min(a.top, r.too_big.size()); ++i)
        fmt::print("{:>3} does not fit: {}\n", i + 1, does_not_fit(r.too_big[i], cluster));
    }
  }
  if (r.ranked.empty()) {
    if (r.too_big.empty())
      fail("no valid layout of {} on {} devices with global batch {}: change --nodes, "
           "--global-batch or the pinned dimensions",
           base.model.name, world, w.global_batch);
    fail("no layout fits in {:.0f} GB per device (the smallest, {}, needs {:.1f} GB): add nodes "
         "or allow more sharding",
         cluster.memory_gb, describe(r.too_big.front().layout), r.too_big.front().memory.total() / 1e9);
  }
  if (!a.write_config.empty()) {
    data::write_text_file(a.write_config, layout_config_toml(base, r.ranked.front().layout));
    if (!a.json)
      fmt::print("\nwrote the best layout to {} (mpirun -np {} kintsugi train --config {})\n",
                 a.write_config, world, a.write_config);
  }
}

// An option that takes one whole number (--nodes, --ranks, --global-batch, --seq), checked here
// so that a bad value gets one line naming the option: a comma-separated list, which only the
// layout pins accept, is refused as such (more node counts mean one plan each).
CLI::Option* one_number(CLI::App* cmd, const std::string& flag, std::int64_t& target,
                        std::int64_t minimum, const std::string& what) {
  auto parse = [flag, &target, minimum](const std::string& text) {
    if (text.find(',') != std::string::npos)
      fail("{} takes one value, not a list ({}): only the layout pins (--tp, --pp, --dp, ...) "
           "take lists; run plan once per value",
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

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "plan", "Predict memory and step time of every valid layout on a cluster; print the best");
  cmd->add_option("--model", a->model, "Model preset (gpt-tiny, llama-13b, bloom-13b, gpt-175b, ...)");
  cmd->add_option("--config,-c", a->config, "Or a run config (TOML) for the model and batch");
  cmd->add_option("--set", a->overrides, "Override a --config key, e.g. --set model.n_layer=4");
  cmd->add_option("--cluster", a->cluster,
                  "Cluster: dgx-a100-80gb, dgx-h100, frontier, gaudi2, local, or a TOML file");
  one_number(cmd, "--nodes", a->nodes, 1, "Nodes (one count)");
  one_number(cmd, "--ranks", a->ranks, 0,
             "local cluster: ranks sharing this machine (default: cores; with --device "
             "cuda: visible GPUs)");
  cmd->add_option("--device", a->device,
                  "local cluster: what each rank computes on: cpu (default: cores shared by the "
                  "ranks) or cuda (a GPU per rank, measured: GEMM curve, attention rate, memory "
                  "and its bandwidth; docs/planner.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  // 0 stands for "not given" in Args (the config's or preset's value), so a 0 written on the
  // command line is refused rather than silently taken as the default.
  one_number(cmd, "--global-batch", a->global_batch, 1, "Sequences per optimizer step")
      ->default_str("the config's, else 16");
  one_number(cmd, "--seq", a->seq, 1, "Sequence length")->default_str("the model's");
  cmd->add_option("--precision", a->precision, "fp32, bf16 or fp16 (default: bf16 for presets)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--grad-precision", a->grad_precision, "fp32 or param")
      ->check(CLI::IsMember({"fp32", "param"}));
  cmd->add_option("--top", a->top, "Layouts to print");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->add_option("--write-config", a->write_config, "Write the best layout as a run config");
  cmd->add_flag("--memory", a->memory,
                "Only the training state's memory (bytes per parameter; Korthikanti et al.'s 22B/175B/1T "
                "table without --model)");
  // Every pin takes one value or a comma-separated list of the values to try.
  auto pin = [cmd](const char* flag, auto& target, const char* what) {
    return cmd->add_option(flag, target, what)->delimiter(',');
  };
  pin("--tp", a->tp, "Pin tensor parallelism (one value, or a list: --tp 2,4)");
  pin("--pp", a->pp, "Pin pipeline stages (one or a list)");
  pin("--dp", a->dp, "Pin data parallelism (one or a list)");
  pin("--micro-batch", a->micro_batch, "Pin the micro-batch (one or a list)");
  pin("--zero", a->zero, "Pin the ZeRO stage (one or a list: --zero 0,1)");
  pin("--hsdp", a->hsdp, "Pin the hybrid-sharding group size (0: shard over all dp; one or a list)");
  pin("--virtual-stages", a->virtual_stages, "Pin chunks per pipeline rank (one or a list)");
  pin("--schedule", a->schedule, "Pin the schedule: gpipe, 1f1b, interleaved (one or a list)");
  pin("--recompute", a->recompute, "Pin recomputation: none, selective, full (one or a list)");
  pin("--sp", a->sp, "Pin sequence parallelism: on, off or on,off")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--attention", a->attention,
                  "Attention kernel of the predicted run: flash (kintsugi's, default) or "
                  "materialized (s x s scores in memory, as Megatron-LM's fused softmax)")
      ->check(CLI::IsMember({"flash", "materialized"}));
  cmd->add_flag("--tp-across-nodes", a->tp_across_nodes, "Also try tensor parallelism across nodes");
  cmd->callback([a] { run_plan(*a); });
}

}  // namespace kintsugi::cli
