// `kintsugi train`: run a training job from a TOML config, as one process or as the ranks of
// an MPI job (mpirun / srun).
#include <fmt/format.h>

#include <algorithm>

#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include "kintsugi/backend/device_info.hpp"
#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/job.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/cli/text_option.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/train/config_agreement.hpp"
#include "kintsugi/train/init_weights.hpp"
#include "kintsugi/train/model_fit.hpp"
#include "kintsugi/train/output_lock.hpp"
#include "kintsugi/train/previous_run.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/saved_config.hpp"
#include "kintsugi/train/tokenizer_check.hpp"
#include "kintsugi/train/train_data.hpp"
#include "kintsugi/train/trainer.hpp"

namespace kintsugi::cli {

namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config, out, metrics, trace, precision, recompute, resume, init_from, device,
      tensorboard;
  std::vector<std::string> overrides;
  LayoutFlagValues layout;  // --tp, --pp, ... (cli/layout_flags.hpp)
  std::optional<int> save_every;
  bool help_config = false, overwrite = false, allow_tokenizer_mismatch = false;
};

// runs/<config name>; without a config file (every key from --set, the flags and the defaults)
// runs/<model preset>, or runs/train when no preset is set either.
std::string default_out_dir(const TrainArgs& args) {
  if (!args.config.empty()) return "runs/" + std::filesystem::path(args.config).stem().string();
  std::string preset;
  for (const std::string& o : args.overrides)  // the last one wins, as in the config
    if (o.rfind("model.preset=", 0) == 0) preset = o.substr(13);
  std::erase(preset, '"');
  std::erase(preset, '\'');
  const bool usable = !preset.empty() && preset.find('/') == std::string::npos && preset != "." &&
                      preset != "..";
  return "runs/" + (usable ? preset : std::string("train"));
}

// The command-line flags as config overrides, after the --set ones (so that flags win).
std::vector<std::string> flag_overrides(const TrainArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  std::ranges::copy(layout_overrides(args.layout), std::back_inserter(overrides));
  if (!args.device.empty()) overrides.push_back(fmt::format("train.device=\"{}\"", args.device));
  if (!args.precision.empty())
    overrides.push_back(fmt::format("train.precision=\"{}\"", args.precision));
  if (!args.recompute.empty())
    overrides.push_back(fmt::format("train.recompute=\"{}\"", args.recompute));
  if (args.save_every) overrides.push_back(fmt::format("train.save_every={}", *args.save_every));
  return overrides;
}

// What every rank must have been given alike besides the config, compared by agree_on_config
// before anything is removed: every rank writes its shard of a checkpoint under --out and rank 0
// lists them all in the manifest, rank 0 alone removes the earlier run for --overwrite, and
// each rank loads the checkpoint it resolved from --resume. Paths are compared absolute.
std::string agreed_flags(const std::string& out_dir, const std::string& metrics_path,
                         bool overwrite, const std::optional<CheckpointInfo>& resume) {
  auto absolute = [](const std::filesystem::path& p) {
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec);
    return fmt::format("\"{}\"", (ec ? p : a).lexically_normal().string());
  };
  return fmt::format("--out = {}\n--metrics = {}\n--overwrite = {}\n--resume = {}\n",
                     absolute(out_dir), absolute(metrics_path), overwrite,
                     resume ? absolute(resume->dir) : "none");
}

// --overwrite: rank 0 removes the earlier run once every rank has agreed to start with the same
// flags; a failure ends every rank with one message.
void start_over(Communicator* world, const std::string& out_dir,
                const std::string& metrics_path) {
  std::string error;
  if (!world || world->rank() == 0) {
    try {
      remove_previous_run(out_dir, metrics_path);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_on_error(world, error);
}

// Rank 0 writes <out>/config.toml (atomically, after --overwrite removed the earlier run's); a
// failure ends every rank with one message.
void save_config(Communicator* world, const std::string& out_dir, const std::string& text) {
  std::string error;
  if (!world || world->rank() == 0) {
    try {
      data::write_text_file(std::filesystem::path(out_dir) / kSavedConfigName, text);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_on_error(world, error);
}

// --resume: rank 0 (holding the output's lock, so no save is in progress) removes what a save
// cut short left, a ".partial" directory, and says so; a failure to remove one only costs disk.
void clear_interrupted_saves(Communicator* world, const std::string& out_dir) {
  if (world && world->rank() != 0) return;
  const std::filesystem::path root = std::filesystem::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return;
  for (const std::string& name : remove_interrupted_saves(root))
    fmt::print("removed {}/{}: a checkpoint save that was interrupted (its step resumes from the "
               "last complete checkpoint)\n",
               root.string(), name);
}

// What every rank sets up before the job starts: each reads and checks the same config and
// reaches the same verdict (agree_on_setup). Nothing is removed here; rank 0's lock creates --out
// and the metrics file.
struct TrainSetup {
  RunConfig config;
  std::optional<TrainInputs> inputs;
  std::optional<CheckpointInfo> resume;
  std::shared_ptr<const InitialWeights> init;
  std::vector<std::string> init_notes;
  data::TokenizerIdentity tokenizer;  // of the data (tokenizer_identity.hpp)
  std::vector<std::string> tokenizer_notes;
  std::string saved_text;                           // <out>/config.toml
  std::vector<std::string> config_notes_on_resume;  // what differs from the saved config
  std::optional<OutputLock> lock;  // held until the run ends (rank 0 holds it for the job)
};

// Where the config came from, for the steps after it is read.
struct ConfigSource {
  std::optional<fs::path> saved;  // the resumed run's <out>/config.toml, if it resumes one
  bool has_saved = false;         // that file exists
  std::string path;               // the config file read ("": none)
  std::optional<HfModel> hf;      // --init-from's Hugging Face model folder
  std::string tokenizer_key;      // what named the data's tokenizer
};

// What differs between the config and the saved configuration of the run it resumes.
std::vector<std::string> notes_against_saved(const ConfigSource& source,
                                             const RunConfig& config) {
  if (source.has_saved && source.path == source.saved->string())
    return config_change_notes(load_run_config(source.path, {}), config, source.path);
  if (!source.has_saved) return {};
  try {  // --config given: the saved one is only compared with
    return config_change_notes(load_run_config(source.saved->string(), {}), config,
                               source.saved->string());
  } catch (const Error& e) {
    return {fmt::format("note: not compared with the saved configuration: {}", e.what())};
  }
}

// The config: --config, or a resumed run's saved one, with --set and the flags on top; a Hugging
// Face model folder (--init-from) gives the model's shape and tokenizer (a resumed run too).
ConfigSource read_config(const TrainArgs& args, const std::string& out_dir, TrainSetup& s) {
  ConfigSource source;
  // A resume without --config continues the saved configuration of the run it resumes, the
  // --set and flags on top (train/saved_config.hpp).
  source.saved = resumed_config_path(args.resume, out_dir);
  source.has_saved = source.saved && fs::is_regular_file(*source.saved);
  source.path = args.config.empty() && source.has_saved ? source.saved->string() : args.config;
  s.config = load_run_config(source.path, flag_overrides(args));
  refuse_data_placeholders(s.config.data);  // a config plan wrote, its data still to be named
  const std::string named_tokenizer = s.config.data.tokenizer;
  if (!args.init_from.empty())
    source.hf = adopt_init_model(s.config, args.init_from,
                                 given_keys(source.path, flag_overrides(args)), s.init_notes);
  source.tokenizer_key =
      s.config.data.tokenizer == named_tokenizer ? "data.tokenizer" : "--init-from";
  if (!args.tensorboard.empty()) s.config.metrics.tensorboard_dir = args.tensorboard;
  // What <out>/config.toml records: the config before the job's rank count resolves dp.
  s.saved_text = saved_config_text(s.config);
  s.config_notes_on_resume = notes_against_saved(source, s.config);
  return source;
}

// The layout on the job's ranks, the model in the device's memory, the threads and --trace.
void check_on_this_machine(const TrainArgs& args, const MpiRuntime* mpi, int world,
                           RunConfig& config) {
  resolve_layout(config, world);
  check_model_fits(config, device_memory_bytes(config.train.device),
                   config.train.device == Device::cpu && mpi ? mpi->local_size() : 1);
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && config.train.threads > static_cast<std::int64_t>(cores))
    fail("train.threads = {} is more than the {} cores of this machine: set at most {} (0: "
         "all cores, shared by the ranks of a node)",
         config.train.threads, cores, cores);
  if (std::error_code ec; !args.trace.empty() && std::filesystem::is_directory(args.trace, ec))
    fail("--trace {} is a directory: name the file to write, e.g. {}/trace.json", args.trace,
         args.trace);
}

// --resume: every rank checks the checkpoint (its share of the checksums) before any state
// exists, and its tokenizer, seed and step against this run's.
void check_resume(const TrainArgs& args, const std::string& out_dir, const MpiRuntime* mpi,
                  int world, const ConfigSource& source, TrainSetup& s) {
  const bool rank0 = !mpi || mpi->world_rank() == 0;
  if (const auto dir = resolve_resume(args.resume, out_dir))
    s.resume = inspect_checkpoint(*dir, s.config.model, mpi ? mpi->world_rank() : 0, world);
  std::string warning;
  const std::optional<CheckpointInfo>& resume = s.resume;
  if (resume) {
    data::check_same_tokenizer(
        resume->dir.string(),
        data::identity_from_json(resume->manifest, (resume->dir / "manifest.json").string()),
        "this run's data", s.tokenizer, args.allow_tokenizer_mismatch, &warning);
    if (!warning.empty()) s.tokenizer_notes.push_back(warning);
  }
  if (resume && resume->progress.seed != s.config.train.seed && rank0)
    fmt::print("warning: {} was saved by a run with train.seed = {}; this run has {}, so its "
               "batches differ from that run's (set train.seed = {} to continue it exactly)\n",
               resume->dir.string(), resume->progress.seed, s.config.train.seed,
               resume->progress.seed);
  if (resume && resume->progress.step > s.config.train.steps)
    fail("{} is at step {}, past train.steps = {}: raise train.steps to continue",
         resume->dir.string(), resume->progress.step, s.config.train.steps);
  if (resume && source.saved && !source.has_saved && args.config.empty())
    s.config_notes_on_resume.push_back(fmt::format(
        "note: {} does not exist (builds before this one did not write it): this run takes "
        "the defaults and its --set and flags, not the configuration {} was trained with",
        source.saved->string(), resume->dir.string()));
  if (!resume && args.resume == "auto" && rank0)
    fmt::print("no checkpoint under {}/checkpoints yet: starting at step 0\n", out_dir);
}

void set_up(const TrainArgs& args, const MpiRuntime* mpi, int world, const std::string& out_dir,
            const std::string& metrics_path, TrainSetup& s) {
  const ConfigSource source = read_config(args, out_dir, s);
  check_on_this_machine(args, mpi, world, s.config);
  s.inputs.emplace(open_inputs(s.config));
  s.tokenizer = data_tokenizer({&s.inputs->train, s.inputs->val ? &*s.inputs->val : nullptr},
                               s.config.data, s.config.model.vocab_size, source.tokenizer_key,
                               args.allow_tokenizer_mismatch, s.tokenizer_notes);
  // The metrics file is locked with --out: it may lie outside it.
  if (!mpi || mpi->world_rank() == 0) s.lock.emplace(out_dir, metrics_path);
  if (args.overwrite && !args.resume.empty())
    fail("--overwrite starts over and --resume continues: give only one of them");
  if (args.resume.empty() && !args.overwrite) refuse_to_start_over(out_dir, metrics_path);
  check_resume(args, out_dir, mpi, world, source, s);
  // A resumed run has its own weights; --init-from only starts runs. A kintsugi model/ or
  // training checkpoint gives its weights only (fine-tuning: step 0, new optimizer state);
  // anything else is a Hugging Face file or folder (train/init_weights.hpp).
  if (!args.init_from.empty() && !s.resume)
    s.init = std::make_shared<const InitialWeights>(args.init_from, s.config.model, source.hf,
                                                    "this run's data", s.tokenizer,
                                                    args.allow_tokenizer_mismatch,
                                                    s.tokenizer_notes);
}

void run(const TrainArgs& args) {
  // The faults the tests ask a launched program to inject (core/fault_hooks.hpp).
  const FaultHooks faults = fault_hooks_from(Switches::process());
  std::unique_ptr<MpiRuntime> mpi;
  if (launched_by_mpi())
    mpi = std::make_unique<MpiRuntime>(nullptr, nullptr, faults.stop_at_start);
  const int world = mpi ? mpi->world_size() : 1;

  const std::string out_dir = args.out.empty() ? default_out_dir(args) : args.out;
  const std::string metrics_path = args.metrics.empty() ? out_dir + "/metrics.jsonl" : args.metrics;
  TrainSetup s;
  std::string error;
  try {
    set_up(args, mpi.get(), world, out_dir, metrics_path, s);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_on_setup(mpi.get(), error,
                 error.empty() ? s.config.comm.timeout_s : CommConfig{}.timeout_s);
  const std::string flags = agreed_flags(out_dir, metrics_path, args.overwrite, s.resume);

  if (!mpi || mpi->world_rank() == 0) {
    for (const std::string& note : s.config_notes_on_resume) fmt::print("{}\n", note);
    for (const std::string& note : s.init_notes) fmt::print("{}\n", note);
    for (const std::string& note : config_notes(s.config)) fmt::print("{}\n", note);
    for (const std::string& note : s.tokenizer_notes) fmt::print("{}\n", note);
  }

  set_rank_threads(static_cast<int>(s.config.train.threads), mpi.get());

  TrainOptions options;
  options.out_dir = out_dir;
  options.resume = std::move(s.resume);
  options.init = std::move(s.init);
  options.ranks_per_node = mpi ? mpi->local_size() : 1;
  options.tokenizer = data::to_json(s.tokenizer);
  options.metrics_path = args.metrics;
  options.trace_path = args.trace;
  options.faults = faults;
  run_on_ranks(
      s.config, mpi.get(),
      [&](const Topology* topology) {
        // Under MPI the ranks have agreed on the config and the flags by now (below).
        Communicator* world_comm = topology ? &topology->world() : nullptr;
        if (args.overwrite) start_over(world_comm, out_dir, metrics_path);
        if (!args.resume.empty()) clear_interrupted_saves(world_comm, out_dir);
        save_config(world_comm, out_dir, s.saved_text);
        train(s.config, std::move(*s.inputs), options, std::cout, topology);
      },
      [&](Communicator& world) { agree_on_config(world, s.config, *s.inputs, flags); });
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML config (under mpirun/srun "
                                          "for several ranks)");
  add_text_option(*cmd, "--config,-c", args->config,
                  "Run config (TOML), e.g. configs/gpt-tiny.toml; without it every key is its "
                  "default unless --set or a flag gives it, or, with --resume, the resumed run's "
                  "saved <out>/config.toml");
  cmd->add_option("--set", args->overrides,
                  "Override a config key, e.g. --set train.lr=3e-4 (repeatable)");
  add_text_option(*cmd, "--out", args->out,
                  "Output directory for metrics.jsonl, loss.svg and model/ "
                  "(default: runs/<config name>, or runs/<model.preset> without --config)");
  add_text_option(*cmd, "--metrics", args->metrics,
                  "Write one JSON object per step to this file (default: <out>/metrics.jsonl)");
  add_text_option(*cmd, "--tensorboard", args->tensorboard,
                  "Also write every step's metrics as TensorBoard event files to this directory "
                  "(metrics.tensorboard_dir)");
  add_layout_flags(*cmd, args->layout);
  add_text_option(*cmd, "--precision", args->precision,
                  "fp32, bf16 or fp16 (f32 master weights; fp16 with dynamic loss scaling) "
                  "(train.precision)");
  add_text_option(*cmd, "--device", args->device, "Where to train: cpu or cuda (train.device)");
  add_text_option(*cmd, "--recompute", args->recompute,
                  "Activation recomputation: none, selective or full (train.recompute)");
  add_text_option(*cmd, "--trace", args->trace,
                  "Write the last step's events of every rank as Chrome trace JSON (open in "
                  "Perfetto or chrome://tracing)");
  // An empty value would read as no --resume at all and start the run over: refused (a script
  // whose checkpoint variable is unset must not silently start fresh).
  cmd->add_option_function<std::string>(
         "--resume",
         [args](const std::string& value) {
           if (value.empty())
             fail("--resume '' names no checkpoint: give auto (the newest under "
                  "<out>/checkpoints, if any) or a checkpoint directory");
           args->resume = value;
         },
         "Continue from a training checkpoint: auto (the newest under "
         "<out>/checkpoints, if any) or a checkpoint directory; any layout may load it. "
         "Without --config, the run's saved <out>/config.toml is the config (--set and flags "
         "apply on top); the log lists every key that differs from it")
      ->type_name("TEXT");
  cmd->add_flag("--overwrite", args->overwrite,
                "Start over in an output directory that holds an earlier run: removes its "
                "checkpoints, model and metrics first (without it, such a directory is refused)");
  add_text_option(*cmd, "--init-from", args->init_from,
                  "Start from other weights instead of random ones: a kintsugi run's <out>/model "
                  "or training checkpoint <out>/checkpoints/step-N (weights only: step 0, new "
                  "optimizer state and schedule), a Hugging Face .safetensors file (model shape "
                  "from the config) or model folder (config.json, model.safetensors or its "
                  "sharded index, tokenizer.json), e.g. a downloaded pretrained model or "
                  "`kintsugi export` output");
  cmd->add_flag("--allow-tokenizer-mismatch", args->allow_tokenizer_mismatch,
                "Train although the data files, data.tokenizer or the checkpoint name "
                "different tokenizers (a warning instead of an error)");
  cmd->add_option("--save-every", args->save_every,
                  "Write a training checkpoint every N steps (train.save_every)");
  cmd->add_flag("--help-config", args->help_config, "List every config key and exit");
  cmd->callback([args] {
    if (args->help_config) {
      for (const auto& k : run_config_keys())
        fmt::print("{:<28} {:<8} default {:<22} {}\n", k.key, k.type, k.default_value, k.doc);
      return;
    }
    run(*args);
  });
}

}  // namespace kintsugi::cli
