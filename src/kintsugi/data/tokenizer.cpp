#include "kintsugi/data/tokenizer.hpp"

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/fetched_files.hpp"
#include "kintsugi/data/hf_tokenizer.hpp"

namespace kintsugi::data {

namespace fs = std::filesystem;

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  encode_into(text, ids);
  return ids;
}

void Tokenizer::encode_with_specials(std::string_view text, std::vector<std::int32_t>& out) const {
  out.insert(out.end(), text_prefix().begin(), text_prefix().end());
  encode_into(text, out);
  out.insert(out.end(), text_suffix().begin(), text_suffix().end());
}

void Tokenizer::encode_document(std::string_view text, std::vector<std::int32_t>& out) const {
  encode_with_specials(text, out);
  if (text_suffix().empty() || text_suffix().back() != eos_id()) out.push_back(eos_id());
}

bool has_tokenizer_files(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") ||
         (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) ||
         (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"));
}

void refuse_sentencepiece_only(const fs::path& dir, std::string_view or_else) {
  if (std::error_code ec; !fs::is_directory(dir, ec) || has_tokenizer_files(dir) ||
                          !fs::exists(dir / "tokenizer.model", ec))
    return;
  fail("{} holds tokenizer.model (SentencePiece) but no tokenizer.json: kintsugi reads "
       "tokenizer.json, not SentencePiece's own file; add the model's tokenizer.json "
       "(transformers' AutoTokenizer.from_pretrained(folder).save_pretrained(folder) writes "
       "one){}",
       dir.string(), or_else);
}

namespace {

std::unique_ptr<Tokenizer> load_files(const fs::path& path) {
  if (fs::is_regular_file(path)) {
    if (path.extension() != ".json")
      fail("{} is neither a tokenizer.json nor a directory of tokenizer files", path.string());
    return HfTokenizer::load(path);
  }
  if (fs::exists(path / "tokenizer.json")) return HfTokenizer::load(path / "tokenizer.json");
  refuse_sentencepiece_only(path, "");
  if (fs::is_directory(path) && !has_tokenizer_files(path) && !fs::exists(path / "encoder.json"))
    fail("tokenizer directory {} holds neither tokenizer.json nor GPT-2's encoder.json and "
         "vocab.bpe: {}",
         path.string(),
         hint_for(path, "run scripts/fetch_data.sh (it fetches the tokenizers the examples use)",
                  "name a directory that holds them"));
  return std::make_unique<BpeTokenizer>(BpeTokenizer::load(path));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path, std::string_view given_as) {
  // An empty path would name the working directory's files ("" / "tokenizer.json").
  if (path.empty())
    fail("{} is empty: name a tokenizer.json (or its directory) or GPT-2's directory", given_as);
  try {
    return load_files(path);
  } catch (const Error& e) {
    fail("{}: {}", given_as, e.what());
  }
}

}  // namespace kintsugi::data
