#include "kintsugi/cli/plan_run_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/batch_rampup.hpp"
#include "kintsugi/train/layout_config.hpp"
#include "kintsugi/train/train_data.hpp"

namespace kintsugi::cli {

PlannedRun planned_run(const RunConfig& base, const std::set<std::string>& given,
                       const Candidate& best, const ClusterSpec& cluster, double tokens,
                       const std::optional<RampupSuggestion>& rampup, const std::string& path) {
  KINTSUGI_ASSERT(cluster.train_device.has_value());
  const Layout& layout = best.prediction.layout;
  RunConfig c = base;
  c.train.global_batch = best.workload.global_batch;
  c.train.precision = best.workload.precision;
  c.train.device = *cluster.train_device;
  if (rampup) {
    c.train.batch_rampup = {rampup->start, rampup->increment, rampup->samples};
    c.train.batch_lr_rule = "none";
  }
  std::vector<std::string> notes;  // what plan set, for the header
  const auto seq = static_cast<double>(c.model.seq_len);
  if (tokens > 0) {
    const double sequences = std::ceil(tokens / seq);
    if (sequences > 9e18)
      fail("--tokens {:.4g} is {:.4g} sequences of {}, more than a run can count: give a budget "
           "a run can train",
           tokens, sequences, c.model.seq_len);
    c.train.steps = steps_to_consume(batch_rampup_of(c.train), c.train.global_batch,
                                     static_cast<std::int64_t>(sequences));
    notes.push_back(fmt::format("train.steps = {}: the budget, {:.4g} tokens in sequences of {} "
                                "at global batch {}{}",
                                c.train.steps, tokens, c.model.seq_len, c.train.global_batch,
                                rampup ? " after the ramp-up's smaller batches" : ""));
  } else {
    notes.push_back(fmt::format("train.steps = {}: {} (plan --tokens N writes a budget's steps)",
                                c.train.steps,
                                given.count("train.steps") ? "the config's"
                                                           : "kintsugi's default, not a budget"));
  }
  const double step = best.prediction.time.total();
  if (!given.count("train.save_every")) {
    c.train.save_every = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(kCheckpointEverySeconds / step), 1, c.train.steps);
    notes.push_back(fmt::format("train.save_every = {}: a training checkpoint every hour of "
                                "predicted time\n#   ({:.3g} s per step), so a failure loses at "
                                "most that",
                                c.train.save_every, step));
  }
  notes.push_back(fmt::format("train.device = \"{}\": the devices of {}", name_of(c.train.device),
                              cluster.name));
  std::vector<std::string> placeholders;
  for (const auto& [key, field, what] :
       {std::tuple{"data.train", &c.data.train, "your training data, a token file or Megatron "
                                                "dataset (kintsugi data tokenize)"},
        std::tuple{"data.val", &c.data.val, "your validation data, or an empty string for none"},
        std::tuple{"data.tokenizer", &c.data.tokenizer, "your data's tokenizer"}})
    if (!given.count(key)) {
      *field = data_placeholder(what);
      placeholders.push_back(key);
    }

  const std::int64_t world = layout.parallel.world(),
                     per_node = std::min(world, cluster.devices_per_node);
  const std::string launch =
      world == 1 ? fmt::format("kintsugi train --config {}", path)
      : world <= per_node
          ? fmt::format("mpirun -np {} kintsugi train --config {}", world, path)
          : fmt::format("mpirun -np {} -N {} --hostfile HOSTS kintsugi train --config {} (Open "
                        "MPI; srun -N {} --ntasks-per-node {} under Slurm)",
                        world, per_node, path, world / per_node, per_node);
  const std::string todo =
      placeholders.empty()
          ? std::string()
          : fmt::format("set {} (placeholders `kintsugi train` refuses), then ",
                        fmt::join(placeholders, ", "));
  std::string header = fmt::format(
      "# Written by `kintsugi plan --write-config` (docs/planner.md, \"The run config plan "
      "writes\"):\n# {} on {} ({} devices), predicted {:.3g} s per step.\n",
      describe(layout), cluster.name, world, step);
  for (const std::string& n : notes) header += "# " + n + "\n";
  header += fmt::format("# To train: {}launch {} ranks:\n#   {}\n", todo, world, launch);
  const std::string checkpoints =
      c.train.save_every > 0 ? fmt::format("a checkpoint every {} steps", c.train.save_every)
                             : "no training checkpoints (the config's train.save_every = 0)";
  return {header + layout_config_toml(c, layout),
          fmt::format("wrote the best layout to {}: {} steps, {}, device {}; {}launch {} ranks: "
                      "{}",
                      path, c.train.steps, checkpoints, name_of(c.train.device), todo, world,
                      launch)};
}

}  // namespace kintsugi::cli
