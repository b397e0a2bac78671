#include "kintsugi/train/model_tokenizer.hpp"

#include <system_error>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

bool copy_tokenizer(const std::string& tokenizer_dir, const fs::path& model_dir) {
  const char* files[] = {"encoder.json", "vocab.bpe"};
  for (const char* f : files)
    if (!fs::is_regular_file(fs::path(tokenizer_dir) / f)) return false;
  const fs::path to = model_dir / "tokenizer";
  std::error_code ec;
  fs::create_directories(to, ec);
  for (const char* f : files)
    if (!ec)
      fs::copy_file(fs::path(tokenizer_dir) / f, to / f, fs::copy_options::overwrite_existing, ec);
  if (ec) fail("cannot copy the tokenizer into {}: {}", to.string(), ec.message());
  return true;
}

}  // namespace kintsugi
