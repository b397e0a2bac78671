// `kintsugi data ...`: preparing training data.
//   brown     tagged Brown corpus -> train.txt / val.txt
//   tokenize  text files -> one token file, <|endoftext|> after every document
//   info      validate token files and print their header
#include <fmt/format.h>

#include <memory>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/timer.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/brown_corpus.hpp"
#include "kintsugi/data/documents.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/token_file.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::cli {
namespace {

constexpr double kMB = 1e6;

void add_brown(CLI::App& data) {
  struct Options {
    std::string src, out;
    int val_every = 10;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = data.add_subcommand(
      "brown", "Turn the tagged Brown corpus into plain text: OUT/train.txt and OUT/val.txt");
  cmd->add_option("--src", opt->src, "Directory with the corpus files ca01 ... cr09")->required();
  cmd->add_option("--out", opt->out, "Output directory")->required();
  cmd->add_option("--val-every", opt->val_every,
                  "Every N-th file in name order goes to validation")
      ->capture_default_str();
  cmd->callback([opt] {
    auto split = data::prepare_brown(opt->src, opt->out, opt->val_every);
    fmt::print("brown: {} files -> {}/train.txt ({:.2f} MB), {} files -> {}/val.txt ({:.2f} MB)\n",
               split.train_files.size(), opt->out, split.train_bytes / kMB,
               split.val_files.size(), opt->out, split.val_bytes / kMB);
    fmt::print("brown: validation files: {}\n", fmt::join(split.val_files, " "));
  });
}

void add_tokenize(CLI::App& data) {
  struct Options {
    std::string tokenizer = "data/gpt2-tokenizer", out;
    std::vector<std::string> inputs;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = data.add_subcommand(
      "tokenize", "Encode UTF-8 text files into one token file; every document (a whole file, or "
                  "the text between lines \"<|endoftext|>\") is followed by the <|endoftext|> id");
  cmd->add_option("--tokenizer", opt->tokenizer, "Directory with encoder.json and vocab.bpe")
      ->capture_default_str();
  cmd->add_option("--out", opt->out, "Token file to write (FILE.bin)")->required();
  cmd->add_option("inputs", opt->inputs, "Text files, in order")->required();
  cmd->callback([opt] {
    auto tokenizer_ptr = data::load_tokenizer(opt->tokenizer);
    const data::Tokenizer& tokenizer = *tokenizer_ptr;
    Stopwatch clock;
    data::TokenFileWriter writer(opt->out, tokenizer.vocab_size());
    std::vector<std::int32_t> ids;
    std::size_t bytes = 0, documents = 0;
    for (const auto& input : opt->inputs) {
      std::string text = data::read_file(input, "check the input file names");
      data::require_utf8(text, input);
      bytes += text.size();
      for (std::string_view document : data::split_documents(text)) {
        ids.clear();
        tokenizer.encode_document(document, ids);
        writer.append(ids);
        ++documents;
      }
    }
    const auto tokens = writer.size();
    writer.finish();
    const double seconds = clock.seconds();
    fmt::print("tokenize: {} documents, {:.2f} MB of text -> {}: {} tokens in {:.2f} s "
               "({:.2f} MB/s, {:.0f} tokens/s)\n",
               documents, bytes / kMB, opt->out, tokens, seconds, bytes / kMB / seconds,
               tokens / seconds);
  });
}

void add_info(CLI::App& data) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = data.add_subcommand(
      "info", "Validate token files (size, checksums, ids) and print their headers");
  cmd->add_option("files", *files, "Token files")->required();
  cmd->callback([files] {
    for (const auto& path : *files) {
      auto file = data::TokenFile::open(path);
      fmt::print("{}: {} tokens, vocab size {}, {} bytes per token, checksum {:016x}: valid\n",
                 path, file.size(), file.vocab_size(), file.token_width(), file.checksum());
    }
  });
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare training data (Brown corpus, token files)");
  data->require_subcommand(1);
  add_brown(*data);
  add_tokenize(*data);
  add_info(*data);
}

}  // namespace kintsugi::cli
