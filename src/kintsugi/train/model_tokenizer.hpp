#pragma once
// A saved model directory carries its tokenizer (model/tokenizer/: encoder.json and vocab.bpe),
// so that `kintsugi generate --checkpoint <out>/model` needs no path that depends on the working
// directory.
#include <filesystem>
#include <string>

namespace kintsugi {

// Copies the tokenizer files of `tokenizer_dir` (data.tokenizer) into model_dir/tokenizer; does
// nothing when they are not there (a run needs no tokenizer to train). Returns whether it copied.
bool copy_tokenizer(const std::string& tokenizer_dir, const std::filesystem::path& model_dir);

}  // namespace kintsugi
