// `kintsugi export`: a checkpoint's weights as a Hugging Face safetensors file plus the
// config.json next to it, so that transformers (or any safetensors reader) opens the model.
#include <fmt/format.h>

#include <filesystem>

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::cli {

void add_export_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, out, tokenizer;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint's weights as Hugging Face .safetensors + config.json");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "A training checkpoint (<out>/checkpoints/step-N) or a saved model (<out>/model)")
      ->required();
  cmd->add_option("--out", args->out,
                  "The .safetensors file to write; config.json goes next to it (name it "
                  "model.safetensors in its own directory for from_pretrained)")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "Tokenizer to write next to the weights: tokenizer.json (or its directory) or "
                  "GPT-2's directory (default: the one saved with the model, if any)");
  cmd->callback([args] {
    const std::filesystem::path out = args->out;
    if (out.extension() != ".safetensors")
      fail("--out {} must end in .safetensors", args->out);
    const std::string tokenizer_path = !args->tokenizer.empty() ? args->tokenizer
                                       : data::has_tokenizer_files(args->checkpoint)
                                           ? args->checkpoint
                                           : "";
    // Loaded before anything is written, so that a bad --tokenizer leaves no half export.
    const auto tokenizer =
        tokenizer_path.empty() ? nullptr : data::load_tokenizer(tokenizer_path);
    const ModelConfig config = export_hf(args->checkpoint, out);
    fmt::print("wrote {} and {} ({} model, {} layers, d {})\n", out.string(),
               (out.parent_path() / "config.json").string(), name_of(config.family), config.n_layer,
               config.d_model);
    if (tokenizer) {
      tokenizer->save(out.parent_path().empty() ? "." : out.parent_path());
      fmt::print("wrote the tokenizer next to it: {}\n", tokenizer->describe());
    } else {
      fmt::print("no tokenizer written: the checkpoint has none; pass --tokenizer PATH\n");
    }
  });
}

}  // namespace kintsugi::cli
