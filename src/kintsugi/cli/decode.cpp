// `kintsugi decode`: whitespace-separated token ids on stdin -> the text they stand for on
// stdout (GPT-2's files: the exact bytes; tokenizer.json: its decoder's output), nothing added.
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <memory>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/read_file.hpp"

namespace kintsugi::cli {
namespace {

std::vector<std::int32_t> parse_ids(std::string_view text, int vocab_size) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  auto space = [&](std::size_t k) { return std::isspace(static_cast<unsigned char>(text[k])); };
  while (true) {
    while (i < text.size() && space(i)) ++i;
    if (i == text.size()) return ids;
    std::size_t end = i;
    while (end < text.size() && !space(end)) ++end;
    std::string_view word = text.substr(i, end - i);
    std::int64_t id = -1;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec == std::errc::result_out_of_range) id = -1;
    else if (ec != std::errc() || ptr != word.data() + word.size())
      fail("stdin: \"{}\" (word {}) is not a token id: give integers 0..{} separated by "
           "whitespace, as `kintsugi encode` prints them",
           word.substr(0, 40), ids.size() + 1, vocab_size - 1);
    if (id < 0 || id >= vocab_size)
      fail("stdin: token id {} (word {}) is out of range: this tokenizer's ids are 0..{}", word,
           ids.size() + 1, vocab_size - 1);
    ids.push_back(static_cast<std::int32_t>(id));
    i = end;
  }
}

}  // namespace

void add_decode_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "decode", "Write the text of the token ids on stdin (special tokens written out, nothing "
                "added)");
  auto tokenizer_dir = std::make_shared<std::string>("data/gpt2-tokenizer");
  cmd->add_option("--tokenizer", *tokenizer_dir,
                  "tokenizer.json (or its directory), or a directory with GPT-2's encoder.json "
                  "and vocab.bpe")
      ->capture_default_str();
  cmd->callback([tokenizer_dir] {
    auto tokenizer = data::load_tokenizer(*tokenizer_dir, "--tokenizer");
    auto ids = parse_ids(data::read_stdin(), tokenizer->vocab_size());
    std::string text = tokenizer->decode(ids);
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
      fail("cannot write the decoded text to stdout");
  });
}

}  // namespace kintsugi::cli
