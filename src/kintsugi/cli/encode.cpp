// `kintsugi encode`: UTF-8 text on stdin -> GPT-2 token ids on one line of stdout.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::cli {

void add_encode_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "encode", "Print the GPT-2 token ids of the UTF-8 text on stdin, space-separated on one line");
  auto tokenizer_dir = std::make_shared<std::string>("data/gpt2-tokenizer");
  cmd->add_option("--tokenizer", *tokenizer_dir, "Directory with encoder.json and vocab.bpe")
      ->capture_default_str();
  cmd->callback([tokenizer_dir] {
    auto tokenizer = data::BpeTokenizer::load(*tokenizer_dir);
    std::string text = data::read_stdin();
    data::require_utf8(text, "stdin");
    auto ids = tokenizer.encode(text);
    std::string line = fmt::format("{}\n", fmt::join(ids, " "));
    if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() || std::fflush(stdout) != 0)
      fail("cannot write the token ids to stdout");
  });
}

}  // namespace kintsugi::cli
