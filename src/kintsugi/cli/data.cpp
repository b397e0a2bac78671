// `kintsugi data ...`: preparing training data.
//   brown     tagged Brown corpus -> train.txt / val.txt
//   tokenize  text or JSONL files -> one token file or Megatron dataset, on every core
//   info      validate token files / Megatron datasets and print what they hold
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <memory>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/brown_corpus.hpp"
#include "kintsugi/data/corpus.hpp"
#include "kintsugi/data/megatron_dataset.hpp"
#include "kintsugi/data/token_file.hpp"

namespace kintsugi::cli {
namespace {

constexpr double kMB = 1e6;

namespace fs = std::filesystem;

// The files `data tokenize` reads: the inputs, and the tokenizer's (its file, or the files of
// its directory).
std::vector<fs::path> files_read(const std::vector<fs::path>& inputs, const fs::path& tokenizer) {
  std::vector<fs::path> read = inputs;
  std::error_code ec;
  if (fs::is_directory(tokenizer, ec)) {
    for (const auto& entry : fs::directory_iterator(tokenizer, ec))
      if (entry.is_regular_file(ec)) read.push_back(entry.path());
  } else {
    read.push_back(tokenizer);
  }
  return read;
}

// An output is renamed over its path when complete, so an output that is one of the files
// read would replace it: the text of a corpus lost for its tokens. Refused before anything is
// written, by file identity (device and inode), so that another name for the file (./x, a
// link) is caught too.
void refuse_output_over_input(const std::string& out, const std::vector<fs::path>& outputs,
                              const std::vector<fs::path>& read) {
  for (const fs::path& output : outputs)
    for (const fs::path& input : read) {
      std::error_code ec;
      if (!fs::equivalent(output, input, ec)) continue;  // ec: one of them does not exist
      fail("--out {} would replace {}, which this command reads{}: choose another --out", out,
           input.string(),
           output == input ? "" : fmt::format(" ({} is the same file)", output.string()));
    }
}

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
    std::string tokenizer = "data/gpt2-tokenizer", out, format = "kintsugi";
    std::vector<std::string> inputs;
    data::CorpusOptions corpus;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = data.add_subcommand(
      "tokenize",
      "Encode text files (documents separated by lines \"<|endoftext|>\") or JSONL records into "
      "one token file on every core; each document gets the tokenizer's specials and ends with "
      "its end-of-document id (docs/data.md)");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "tokenizer.json (or its directory), or a directory with GPT-2's encoder.json "
                  "and vocab.bpe")
      ->capture_default_str();
  cmd->add_option("--out", opt->out,
                  "Token file to write (FILE.bin), or with --format megatron the prefix of "
                  "PREFIX.bin and PREFIX.idx")
      ->required();
  cmd->add_option("--format", opt->format,
                  "kintsugi (one token file) or megatron (Megatron-LM's indexed dataset)")
      ->check(CLI::IsMember({"kintsugi", "megatron"}))
      ->capture_default_str();
  cmd->add_flag("--jsonl", opt->corpus.jsonl,
                "Inputs are JSON Lines: one document per line, in the field --key");
  cmd->add_option("--key", opt->corpus.key, "JSONL field holding the document")
      ->capture_default_str();
  cmd->add_option("--threads", opt->corpus.threads, "Worker threads (0: every core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("inputs", opt->inputs, "Input files, in order")->required();
  cmd->callback([opt] {
    const std::vector<std::filesystem::path> inputs(opt->inputs.begin(), opt->inputs.end());
    std::vector<fs::path> outputs = {opt->out};
    if (opt->format == "megatron") {
      const fs::path prefix = data::megatron_prefix(opt->out);
      outputs = {fs::path(prefix) += ".bin", fs::path(prefix) += ".idx"};
    }
    refuse_output_over_input(opt->out, outputs, files_read(inputs, opt->tokenizer));
    const auto tokenizer = data::load_tokenizer(opt->tokenizer, "--tokenizer");
    data::CorpusStats stats;
    std::string written;
    // Inputs without a document (an empty file, a JSONL file of no records) would make a token
    // file of no tokens, which no run can read: refused before the writer commits anything.
    auto refuse_empty = [&] {
      if (stats.tokens == 0)
        fail("{} hold{} no documents: no tokens to write to {} (is the input empty?)",
             fmt::join(opt->inputs, ", "), opt->inputs.size() == 1 ? "s" : "", opt->out);
    };
    if (opt->format == "megatron") {
      data::MegatronWriter writer(opt->out, tokenizer->vocab_size());
      stats = data::tokenize_corpus(*tokenizer, inputs, opt->corpus,
                                    [&](std::span<const std::int32_t> ids) { writer.add_document(ids); });
      refuse_empty();
      writer.finish();
      const auto prefix = data::megatron_prefix(opt->out).string();
      written = prefix + ".bin and " + prefix + ".idx";
    } else {
      // The header records the tokenizer, so that a run with another one is refused
      // (tokenizer_identity.hpp); Megatron's format has no place for it.
      data::TokenFileWriter writer(opt->out, tokenizer->vocab_size(), tokenizer->fingerprint());
      stats = data::tokenize_corpus(*tokenizer, inputs, opt->corpus,
                                    [&](std::span<const std::int32_t> ids) { writer.append(ids); });
      refuse_empty();
      writer.finish();
      written = opt->out;
    }
    fmt::print("tokenize: {} documents, {:.2f} MB of text -> {}: {} tokens in {:.2f} s on {} "
               "thread{} ({:.2f} MB/s, {:.0f} tokens/s)\n",
               stats.documents, stats.bytes / kMB, written, stats.tokens, stats.seconds,
               stats.threads, stats.threads == 1 ? "" : "s", stats.bytes / kMB / stats.seconds,
               stats.tokens / stats.seconds);
  });
}

void add_info(CLI::App& data) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = data.add_subcommand(
      "info", "Validate token files or Megatron datasets (sizes, checksums, index, ids) and print "
              "what they hold");
  cmd->add_option("files", *files, "Token files, or Megatron datasets (PREFIX, PREFIX.bin or PREFIX.idx)")
      ->required();
  cmd->callback([files] {
    for (const auto& path : *files) {
      if (data::is_megatron_dataset(path)) {
        auto d = data::MegatronDataset::open(path);
        fmt::print("{}: Megatron dataset, {} documents, {} tokens, dtype code {}, largest id {}: "
                   "valid\n", path, d->documents(), d->size(), d->dtype_code(), d->max_id());
        continue;
      }
      auto file = data::TokenFile::open(path);
      fmt::print("{}: {} tokens, vocab size {}, {} bytes per token, checksum {:016x}, tokenizer "
                 "{}: valid\n",
                 path, file.size(), file.vocab_size(), file.token_width(), file.checksum(),
                 file.tokenizer().fingerprint != 0
                     ? fmt::format("fingerprint {:016x}", file.tokenizer().fingerprint)
                     : std::string("not recorded (format version 1)"));
    }
  });
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand(
      "data", "Prepare training data (Brown corpus, token files, Megatron datasets)");
  data->require_subcommand(1);
  add_brown(*data);
  add_tokenize(*data);
  add_info(*data);
}

}  // namespace kintsugi::cli
