// `kintsugi eval`: loss and perplexity of a model on a token file, as one process or as the
// ranks of an MPI job in any layout. The loss is train's validation loss (one function computes
// both: train/evaluation.hpp) for the same windows.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "kintsugi/backend/device_info.hpp"
#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/job.hpp"
#include "kintsugi/cli/layout_flags.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/core/json_file.hpp"
#include "kintsugi/core/threads.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/model/config_json.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/train/evaluation.hpp"
#include "kintsugi/train/init_weights.hpp"
#include "kintsugi/train/model_fit.hpp"
#include "kintsugi/train/train_data.hpp"
#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/run_description.hpp"

namespace kintsugi::cli {

namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string checkpoint, init_from, config, data, precision, device;
  std::vector<std::string> overrides;
  LayoutFlagValues layout;  // --tp, --pp, ... (cli/layout_flags.hpp)
  std::int64_t windows = 0, micro_batch = 1;
  int threads = 0;
  bool json = false, allow_tokenizer_mismatch = false;
};

// What the weights come from, read and checked on every rank before any model exists.
struct Weights {
  std::optional<CheckpointInfo> train_checkpoint;                  // --checkpoint step-N
  std::optional<std::map<std::string, NamedTensor>> whole_tensors;  // --checkpoint model/
  std::optional<InitialWeights> init;  // --init-from: what train --init-from takes
  std::string source;
  // The balancing bias that routes a DeepSeek-style model's tokens (docs/moe.md); empty: none.
  std::vector<float> router_bias;
};

// The job's config and, for --init-from a Hugging Face folder, what its config.json says.
struct EvalSetup {
  RunConfig config;
  std::optional<HfModel> hf;
  std::vector<std::string> notes;  // for the log (rank 0)
};

// The manifest of a checkpoint directory: a training checkpoint or a saved model.
nlohmann::json read_manifest(const fs::path& dir) {
  return read_json_file(dir / "manifest.json",
                        "{} is not a checkpoint (no manifest.json): give a training checkpoint "
                        "(<out>/checkpoints/step-N) or a saved model (<out>/model)",
                        dir.string());
}

// The job's config: the model from the checkpoint, from --init-from's (a kintsugi run's
// manifest without --config, a Hugging Face folder's config.json) or from --config (a
// .safetensors file), the layout from the flags, and a batch of one micro-batch per
// data-parallel rank and stage (only its micro-batch size matters here).
EvalSetup eval_config(const EvalArgs& args, int world) {
  if (args.checkpoint.empty() == args.init_from.empty())
    fail("eval needs either --checkpoint DIR (a training checkpoint or a saved model) or "
         "--init-from PATH (what train --init-from takes: a kintsugi run's model/ or "
         "checkpoints/step-N, a Hugging Face model folder, or a .safetensors file with --config "
         "FILE.toml for the model's shape)");
  std::error_code ec;
  const bool init_dir = !args.init_from.empty() && fs::is_directory(args.init_from, ec);
  if (!args.init_from.empty() && !init_dir && args.config.empty())
    fail("--init-from {} needs --config FILE.toml for the model's shape (a Hugging Face model "
         "folder or a kintsugi run's directory carries its own)",
         args.init_from);
  std::vector<std::string> o = args.overrides;
  std::ranges::copy(layout_overrides(args.layout), std::back_inserter(o));
  if (!args.device.empty()) o.push_back(fmt::format("train.device=\"{}\"", args.device));
  if (!args.precision.empty()) o.push_back(fmt::format("train.precision=\"{}\"", args.precision));
  EvalSetup setup;
  RunConfig& config = setup.config;
  config = load_run_config(args.config, o);
  // The same first step as train's --init-from (train/init_weights.hpp): a Hugging Face folder
  // gives the model's shape.
  if (!args.init_from.empty())
    setup.hf = adopt_init_model(config, args.init_from, given_keys(args.config, o), setup.notes);
  // A kintsugi run's directory, like --checkpoint, gives its model unless --config does (then
  // that model must be the saved one, but for model.seq_len: kintsugi_weights.hpp).
  const std::string from = !args.checkpoint.empty() ? args.checkpoint
                           : init_dir && !setup.hf && args.config.empty() ? args.init_from
                                                                           : "";
  if (!from.empty()) {
    const std::string what = (fs::path(from) / "manifest.json").string();
    const nlohmann::json manifest = read_manifest(from);
    if (!manifest.contains("model")) fail("{} has no model configuration", what);
    config.model = model_config_from_json(manifest.at("model"), what);
  }
  // --init-from's weights carry no balancing bias: such a model is read with --checkpoint.
  if (!args.init_from.empty()) refuse_router_bias_inference(config.model, "eval --init-from");
  // One micro-batch per data-parallel rank and stage.
  const ParallelLayout p = config.parallel.resolved(world);
  config.train.micro_batch = args.micro_batch;
  config.train.global_batch = args.micro_batch * p.dp * p.pp;
  resolve_layout(config, world);
  return setup;
}

// The weights, checked; the tokenizer they record (or a Hugging Face folder's) against the
// data's.
Weights read_weights(const EvalArgs& args, EvalSetup& setup, const data::TokenizerIdentity& data_ids,
                     int rank, int world) {
  const RunConfig& config = setup.config;
  Weights w;
  w.source = args.checkpoint.empty() ? args.init_from : args.checkpoint;
  if (!args.init_from.empty()) {
    // A folder's tokenizer is the model's (adopt_hf_folder made it data.tokenizer): the data's
    // ids must be its.
    if (setup.hf && data::has_tokenizer_files(args.init_from)) {
      std::string warning;
      const data::TokenizerIdentity folder =
          data::identity_of(*data::load_tokenizer(args.init_from, "--init-from"));
      data::check_same_tokenizer(args.init_from, folder, args.data, data_ids,
                                 args.allow_tokenizer_mismatch, &warning);
      if (!warning.empty()) setup.notes.push_back(warning);
    }
    w.init.emplace(args.init_from, config.model, setup.hf, args.data, data_ids,
                   args.allow_tokenizer_mismatch, setup.notes);
  } else {
    const nlohmann::json manifest = read_manifest(args.checkpoint);
    const std::string where = (fs::path(args.checkpoint) / "manifest.json").string();
    w.router_bias = model_manifest::router_bias_from_json(manifest, where);
    model_manifest::require_router_bias(manifest, w.router_bias, where, "eval");
    if (manifest.value("format", "") == "kintsugi-model")
      w.whole_tensors = read_model_tensors(args.checkpoint);
    else  // every rank checks its share of the checksums
      w.train_checkpoint = inspect_checkpoint(args.checkpoint, config.model, rank, world);
  }
  return w;
}

// Builds this rank's part of the model, loads the weights and evaluates; rank 0 prints.
void evaluate(const RunConfig& config, const Weights& weights, const data::BatchSampler& data,
              const EvalArgs& args, std::int64_t windows, const Topology* topology) {
  const Place place(topology, config.parallel.sequence_parallel);
  MemoryTracker memory;
  auto backend = make_backend(config.train.device, memory);
  Tracer tracer;
  StageModel model(*backend, config, place, tracer);
  if (weights.train_checkpoint) {
    load_train_checkpoint(*weights.train_checkpoint, rank_state(model, place));
  } else {
    std::string error;  // shapes are checked on every rank; one of them reports a mismatch
    try {
      if (weights.init)
        weights.init->set(rank_state(model, place));
      else
        set_weights(*weights.whole_tensors, rank_state(model, place), weights.source);
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_error(topology ? &topology->world() : nullptr, error);
  }
  if (!weights.router_bias.empty() && !model.moe_router_bias().empty())
    model.set_moe_router_bias(weights.router_bias);
  Stopwatch clock;
  const double loss =
      mean_window_loss(model, place, data, windows, config.train.micro_batch).value();
  const double seconds = clock.seconds();
  if (!place.chief) return;
  const std::int64_t tokens = windows * config.model.seq_len;
  if (args.json) {
    const nlohmann::json j = {{"loss", loss},
                              {"perplexity", std::exp(loss)},
                              {"windows", windows},
                              {"tokens", tokens},
                              {"seq_len", config.model.seq_len},
                              {"data", args.data},
                              {"weights", weights.source},
                              {"layout", layout_json(config, place)},
                              {"seconds", seconds}};
    fmt::print("{}\n", j.dump());
    return;
  }
  // The layout as train's log describes it (the tensor grid, ZeRO and the schedule included).
  fmt::print("eval | {} on {} | {} window{} of {} tokens ({} predicted tokens) | {}\n"
             "loss {:.4f} | perplexity {:.2f} | {:.2f} s\n",
             weights.source, args.data, windows, windows == 1 ? "" : "s", config.model.seq_len,
             tokens, describe_layout(config, place, model), loss, std::exp(loss), seconds);
}

void run(const EvalArgs& args) {
  std::unique_ptr<MpiRuntime> mpi;
  if (launched_by_mpi())
    mpi = std::make_unique<MpiRuntime>(nullptr, nullptr,
                                       fault_hooks_from(Switches::process()).stop_at_start);
  const int world = mpi ? mpi->world_size() : 1, rank = mpi ? mpi->world_rank() : 0;

  // Setup: every rank reads and checks the same inputs and reaches the same verdict.
  EvalSetup setup;
  const RunConfig& config = setup.config;
  std::optional<data::BatchSampler> data;
  std::optional<Weights> weights;
  std::int64_t windows = 0;
  std::string error;
  try {
    setup = eval_config(args, world);
    // The model is built as for training (its gradients and optimizer state included).
    check_model_fits(config, device_memory_bytes(config.train.device),
                     config.train.device == Device::cpu && mpi ? mpi->local_size() : 1);
    data.emplace(open_one_dataset(args.data, "--data", config));
    const std::int64_t mb = config.train.micro_batch;
    const std::int64_t disjoint = data->max_disjoint_eval_windows();
    // More windows than the file holds would overlap: the same tokens scored again (and
    // --windows 1e9 would run for weeks), not a better estimate.
    if (args.windows > disjoint)
      fail("--windows {} is more than the {} windows of {} tokens {} holds: give at most {} (0: "
           "all of them)",
           args.windows, disjoint, config.model.seq_len, args.data, disjoint);
    windows = args.windows > 0 ? args.windows : disjoint / mb * mb;
    // (A file shorter than one window is refused when it is opened, naming model.seq_len.)
    if (windows < 1)
      fail("{} holds {} window{} of {} tokens, fewer than --micro-batch {}: give --micro-batch {}",
           args.data, disjoint, disjoint == 1 ? "" : "s", config.model.seq_len, mb, disjoint);
    if (windows % mb != 0)
      fail("--windows {} is not a multiple of --micro-batch {}: change one of them", windows, mb);
    weights.emplace(read_weights(args, setup, data->tokens().tokenizer(), rank, world));
    // The data's ids must be the ones the model was trained on (tokenizer_identity.hpp).
    if (!args.checkpoint.empty()) {
      std::string warning;
      const data::TokenizerIdentity model_tokenizer = data::identity_from_json(
          read_manifest(args.checkpoint), (fs::path(args.checkpoint) / "manifest.json").string());
      data::check_same_tokenizer(args.checkpoint, model_tokenizer, args.data,
                                 data->tokens().tokenizer(), args.allow_tokenizer_mismatch,
                                 &warning);
      if (!warning.empty() && rank == 0) fmt::print("{}\n", warning);
      // A --data that records no tokenizer (a Megatron dataset): its largest id at least.
      const std::string model_what = fmt::format("--checkpoint {}", args.checkpoint);
      data::check_ids_fit_tokenizer(data->tokens(), model_what, model_tokenizer,
                                    args.allow_tokenizer_mismatch, &warning);
      if (!warning.empty() && rank == 0) fmt::print("{}\n", warning);
      if (std::string note =
              data::unrecorded_tokenizer_note({&data->tokens()}, model_what, model_tokenizer);
          !note.empty())
        setup.notes.push_back(std::move(note));
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree_on_setup(mpi.get(), error, error.empty() ? config.comm.timeout_s : CommConfig{}.timeout_s);
  if (rank == 0)  // beside --json's object, not in it
    for (const std::string& note : setup.notes) fmt::print(args.json ? stderr : stdout, "{}\n", note);

  set_rank_threads(args.threads, mpi.get());
  run_on_ranks(config, mpi.get(), [&](const Topology* topology) {
    evaluate(config, *weights, *data, args, windows, topology);
  });
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand(
      "eval", "Loss and perplexity of a model on a token file (under mpirun/srun in any layout)");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "A training checkpoint (<out>/checkpoints/step-N) or a saved model "
                  "(<out>/model)");
  cmd->add_option("--init-from", args->init_from,
                  "Or the weights train --init-from takes: a kintsugi run's <out>/model or "
                  "<out>/checkpoints/step-N (its model, or --config's with another "
                  "model.seq_len), a Hugging Face model folder (config.json, model.safetensors "
                  "or its sharded index, tokenizer.json) or one .safetensors file (needs "
                  "--config for the model's shape)");
  cmd->add_option("--config,-c", args->config,
                  "Run config (TOML): the model's shape for a .safetensors --init-from, and "
                  "data/comm settings");
  cmd->add_option("--set", args->overrides, "Override a config key (repeatable)");
  cmd->add_option("--data", args->data, "Token file (.bin from `kintsugi data tokenize`)")
      ->required();
  cmd->add_option("--windows", args->windows,
                  "Evaluate this many windows of seq_len tokens, spread evenly over the file "
                  "(0: every window, none overlapping; at most that many; train's validation uses "
                  "train.eval_sequences)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--micro-batch", args->micro_batch, "Windows per forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_layout_flags(*cmd, args->layout);
  cmd->add_option("--precision", args->precision, "fp32 (default), bf16 or fp16");
  cmd->add_option("--device", args->device, "cpu (default) or cuda");
  cmd->add_option("--threads", args->threads, "Compute threads per rank (0: the node's cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args->json, "Print one JSON object instead of text");
  cmd->add_flag("--allow-tokenizer-mismatch", args->allow_tokenizer_mismatch,
                "Evaluate although --data was made with another tokenizer than the checkpoint "
                "records (a warning instead of an error)");
  cmd->callback([args] { run(*args); });
}

}  // namespace kintsugi::cli
