// `kintsugi import`: a Hugging Face model folder as a kintsugi model directory (the model/ a run
// saves), with its tokenizer, without training: the inverse of `kintsugi export`
// (docs/checkpoints.md, "Importing a folder without training").
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/kintsugi_weights.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/train/hf_init.hpp"

namespace kintsugi::cli {

namespace {

namespace fs = std::filesystem;

struct ImportArgs {
  std::string from, out, tokenizer;
  bool overwrite = false;
};

// Whether `dir` is a saved model (the format `import` writes), which --overwrite may replace.
bool is_saved_model(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(in, nullptr, false);
  return in && manifest.is_object() && manifest.value("format", "") == model_manifest::kFormat;
}

// --out: new, or a saved model that --overwrite replaces; never anything else.
void check_out(const ImportArgs& args) {
  std::error_code ec;
  if (!fs::exists(args.out, ec)) return;
  if (!is_saved_model(args.out))
    fail("--out {} exists and is not a kintsugi model directory: choose another --out",
         args.out);
  if (!args.overwrite)
    fail("--out {} holds a model already: pass --overwrite to replace it, or choose another --out",
         args.out);
}

void run_import(const ImportArgs& args) {
  if (is_kintsugi_checkpoint(args.from))
    fail("--from {} is a kintsugi checkpoint already: generate, eval, export and train "
         "--init-from take it as it is",
         args.from);
  check_out(args);
  // Everything is read and checked before anything is written (the folder as train --init-from
  // checks it, the tokenizer, every weight finite).
  HfFolder folder = open_hf_folder(args.from, "--from", args.tokenizer);
  const ModelConfig& config = folder.config.model;
  const auto tokenizer = data::load_tokenizer(
      folder.config.data.tokenizer, args.tokenizer.empty() ? "--from" : "--tokenizer");
  MemoryTracker memory;
  auto backend = make_backend(Device::cpu, memory);
  GptModel model(*backend, config, DType::f32, 1, 1);
  folder.weights->set(model.params());

  // Written beside --out and renamed into place when complete: a cut-short import leaves no
  // half-written model, and replaces an earlier one only at the end.
  const fs::path out = args.out;
  const fs::path tmp = out.string() + fmt::format(".import-{}", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    // The weights' own type (bf16 shards widened exactly to f32), so that export writes them
    // back as they were.
    save_model(tmp, config, model.params(), 0, data::to_json(data::identity_of(*tokenizer)),
               folder.weights->dtype());
    tokenizer->save(tmp, config.seq_len);
    const fs::path old = out.string() + fmt::format(".old-{}", getpid());
    const bool replaced = fs::exists(out);
    if (replaced) fs::rename(out, old);
    fs::rename(tmp, out);
    fs::remove_all(old, ec);
    for (const std::string& note : folder.notes) fmt::print("{}\n", note);
    fmt::print("wrote {} ({} model, {} layers, d {}, {} weights) from {}, with its tokenizer: "
               "{}{}\n",
               out.string(), name_of(config.family), config.n_layer, config.d_model,
               name_of(folder.weights->dtype()), args.from, tokenizer->describe(),
               replaced ? " (replaced the model that was there)" : "");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "import", "Write a Hugging Face model folder as a kintsugi model directory, without training");
  auto args = std::make_shared<ImportArgs>();
  cmd->add_option("--from", args->from, "A Hugging Face model folder (config.json, "
                  "model.safetensors or its sharded index, tokenizer.json)")->required();
  cmd->add_option("--out", args->out, "The model directory to write, as a run's <out>/model "
                  "(written beside it, renamed into place when complete)")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (or its directory) or GPT-2's "
                  "directory to save with the model (default: the folder's)");
  cmd->add_flag("--overwrite", args->overwrite,
                "Replace the model directory --out holds (anything else there is refused)");
  cmd->callback([args] { run_import(*args); });
}

}  // namespace kintsugi::cli
