// `kintsugi export`: a checkpoint's weights as a Hugging Face safetensors file plus the
// config.json next to it, so that transformers (or any safetensors reader) opens the model.
#include <fmt/format.h>

#include <filesystem>

#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cli {

void add_export_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, out;
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
  cmd->callback([args] {
    const std::filesystem::path out = args->out;
    if (out.extension() != ".safetensors")
      fail("--out {} must end in .safetensors", args->out);
    const ModelConfig config = export_hf(args->checkpoint, out);
    fmt::print("wrote {} and {} ({} model, {} layers, d {})\n", out.string(),
               (out.parent_path() / "config.json").string(), name_of(config.family), config.n_layer,
               config.d_model);
  });
}

}  // namespace kintsugi::cli
