// `kintsugi train`: run a training job from a TOML config.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/trainer.hpp"

namespace kintsugi::cli {

void add_train_command(CLI::App& app) {
  struct Args {
    std::string config, out, metrics;
    std::vector<std::string> overrides;
    bool help_config = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML config");
  cmd->add_option("--config,-c", args->config, "Run config (TOML), e.g. configs/gpt-tiny.toml");
  cmd->add_option("--set", args->overrides,
                  "Override a config key, e.g. --set train.lr=3e-4 (repeatable)");
  cmd->add_option("--out", args->out,
                  "Output directory for metrics.jsonl, loss.svg and model/ "
                  "(default: runs/<config name>)");
  cmd->add_option("--metrics", args->metrics,
                  "Write one JSON object per step to this file (default: <out>/metrics.jsonl)");
  cmd->add_flag("--help-config", args->help_config, "List every config key and exit");
  cmd->callback([args] {
    if (args->help_config) {
      for (const auto& k : run_config_keys())
        fmt::print("{:<26} {:<8} default {:<22} {}\n", k.key, k.type, k.default_value, k.doc);
      return;
    }
    if (args->config.empty())
      throw kintsugi::Error("train needs --config FILE.toml (for example configs/gpt-tiny.toml)");
    RunConfig config = load_run_config(args->config, args->overrides);
    TrainOptions options;
    options.out_dir = args->out.empty()
                          ? "runs/" + std::filesystem::path(args->config).stem().string()
                          : args->out;
    options.metrics_path = args->metrics;
    train(config, options, std::cout);
  });
}

}  // namespace kintsugi::cli
