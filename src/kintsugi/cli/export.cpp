// `kintsugi export`: a checkpoint's weights as a Hugging Face safetensors file plus the
// config.json next to it, so that transformers (or any safetensors reader) opens the model.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_manifest.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"

namespace kintsugi::cli {

namespace {

namespace fs = std::filesystem;
// "2GB" (10^9, as transformers reads it), "1GiB" (2^30), "500MB", "64KiB", or bytes.
std::uint64_t parse_size(const std::string& text) {
  std::size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {
      {"", 1},        {"B", 1},           {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9},    {"TB", 1e12},       {"KIB", 1024.0},    {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  const auto it = units.find(unit);
  if (end == 0 || it == units.end() || !(number * it->second >= 1) ||
      number * it->second > 9e18)
    fail("--max-shard-size {}: expected a size such as 2GB, 500MB or 1GiB", text);
  return static_cast<std::uint64_t>(number * it->second);
}

// The tokenizer an export writes when --tokenizer is not given: the one saved with a model
// (<out>/model), or, for a training checkpoint <out>/checkpoints/step-N, the one the same run
// saved in <out>/model when its fingerprint is the one the checkpoint records. Empty when there
// is none; `why_none` then says why, for the log.
std::string default_tokenizer(const fs::path& checkpoint, std::string& why_none) {
  if (data::has_tokenizer_files(checkpoint)) return checkpoint.string();
  std::error_code ec;
  const fs::path step = fs::weakly_canonical(checkpoint, ec);
  const fs::path model = step.parent_path().parent_path() / "model";
  if (ec || step.parent_path().filename() != "checkpoints" || !data::has_tokenizer_files(model)) {
    why_none = "the checkpoint has none";
    return "";
  }
  // The checkpoint's record of its tokenizer (a manifest export_hf cannot read is its to refuse).
  data::TokenizerIdentity recorded;
  try {
    const fs::path manifest = checkpoint / "manifest.json";
    recorded = data::identity_from_json(nlohmann::json::parse(std::ifstream(manifest)),
                                        manifest.string());
  } catch (const std::exception&) {
  }
  const data::TokenizerIdentity saved =
      data::identity_of(*data::load_tokenizer(model, "--checkpoint (its run's model/)"));
  if (recorded.fingerprint != 0 && recorded.fingerprint == saved.fingerprint) return model.string();
  why_none = fmt::format(
      "the checkpoint has none, and the one in {} is not known to be its tokenizer (the "
      "checkpoint records {}; that one is {})",
      model.string(), recorded.known() ? recorded.describe() : "none", saved.describe());
  return "";
}

}  // namespace

void add_export_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, out, tokenizer, max_shard_size, dtype;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint's weights as Hugging Face .safetensors + config.json");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "A training checkpoint (<out>/checkpoints/step-N) or a saved model (<out>/model)")
      ->required();
  cmd->add_option("--out", args->out,
                  "The .safetensors file to write; config.json goes next to it (name it "
                  "model.safetensors in its own directory for from_pretrained). As "
                  "save_pretrained, an earlier export there is written over; each file replaced "
                  "or removed is listed")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "Tokenizer to write next to the weights: tokenizer.json (or its directory) or "
                  "GPT-2's directory (default: the one saved with the model; for "
                  "<out>/checkpoints/step-N, the one in the run's <out>/model if it is the "
                  "tokenizer the checkpoint records)");
  cmd->add_option("--max-shard-size", args->max_shard_size,
                  "Write shards of at most this size (e.g. 2GB, 500MB, 1GiB) and "
                  "model.safetensors.index.json, as transformers' save_pretrained does, when the "
                  "weights are larger (default: one file); needs --out DIR/model.safetensors");
  cmd->add_option("--dtype", args->dtype,
                  "Tensor type to write: f32, bf16 or f16 (default: the weights' own, rounded "
                  "nowhere: a saved model's weights_dtype, e.g. a bf16 run's bf16 working "
                  "weights; a training checkpoint's f32 master weights); a narrower type rounds "
                  "to nearest even, as the run rounds its working weights")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->callback([args] {
    const fs::path out = args->out;
    const std::uint64_t max_shard = args->max_shard_size.empty() ? 0 : parse_size(args->max_shard_size);
    if (out.extension() != ".safetensors")
      fail("--out {} must end in .safetensors", args->out);
    std::string why_none;
    const std::string tokenizer_path =
        !args->tokenizer.empty() ? args->tokenizer : default_tokenizer(args->checkpoint, why_none);
    // Loaded before anything is written, so that a bad --tokenizer leaves no half export.
    const auto tokenizer =
        tokenizer_path.empty()
            ? nullptr
            : data::load_tokenizer(tokenizer_path,
                                   args->tokenizer.empty() ? "--checkpoint" : "--tokenizer");
    const std::optional<DType> dtype =
        args->dtype.empty()
            ? std::nullopt
            : std::optional(model_manifest::weights_dtype_from_name(args->dtype, "--dtype"));
    const HfExport e = export_hf(args->checkpoint, out, max_shard, dtype, tokenizer.get());
    const ModelConfig& config = e.config;
    const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
    const fs::path index = dir / (out.filename().string() + ".index.json");
    fmt::print("wrote {} and {} ({} model, {} layers, d {}): {}\n",
               fs::exists(index) ? index.string() + " with its shards" : out.string(),
               (dir / "config.json").string(), name_of(config.family), config.n_layer,
               config.d_model, describe_export(e, args->checkpoint));
    if (e.tokenizer) {
      fmt::print("wrote the tokenizer next to it (model_max_length {}: the model's seq_len): {}\n",
                 config.seq_len, tokenizer->describe());
    } else {
      fmt::print("no tokenizer written: {}; pass --tokenizer PATH\n", why_none);
      if (data::has_tokenizer_files(dir))
        fmt::print("note: {} holds tokenizer files from before, which may not be this model's "
                   "tokenizer\n",
                   dir.string());
    }
    // As save_pretrained, an earlier export in the folder is written over: said file by file.
    for (const fs::path& f : e.replaced) fmt::print("replaced {}\n", f.string());
    for (const fs::path& f : e.removed)
      fmt::print("removed {} (left by an earlier export: a loader would read it instead of the "
                 "new files or beside them)\n",
                 f.string());
  });
}

}  // namespace kintsugi::cli
