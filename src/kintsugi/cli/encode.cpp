// `kintsugi encode`: UTF-8 text on stdin -> token ids on one line of stdout.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::cli {

void add_encode_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "encode", "Print the token ids of the UTF-8 text on stdin, space-separated on one line "
                "(as Hugging Face's tokenizer.encode(text): with the specials the tokenizer's "
                "post-processor adds, e.g. Llama 2's <s>)");
  struct Args {
    std::string tokenizer = "data/gpt2-tokenizer";
    bool no_specials = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json (or its directory), or a directory with GPT-2's encoder.json "
                  "and vocab.bpe")
      ->capture_default_str();
  cmd->add_flag("--no-specials", args->no_specials,
                "Leave out the specials the post-processor adds around the text");
  cmd->callback([args] {
    auto tokenizer = data::load_tokenizer(args->tokenizer, "--tokenizer");
    std::string text = data::read_stdin();
    data::require_utf8(text, "stdin");
    std::vector<std::int32_t> ids;
    if (args->no_specials)
      tokenizer->encode_into(text, ids);
    else
      tokenizer->encode_with_specials(text, ids);
    std::string line = fmt::format("{}\n", fmt::join(ids, " "));
    if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() || std::fflush(stdout) != 0)
      fail("cannot write the token ids to stdout");
  });
}

}  // namespace kintsugi::cli
