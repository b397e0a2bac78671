#pragma once
// GPT-2's byte-level BPE tokenizer, bit-exact with OpenAI's reference encoder (gpt-2
// src/encoder.py): the same pre-tokenization regex, the same byte-to-symbol mapping and the same
// greedy lowest-rank merges, so token ids match for every valid UTF-8 text. See docs/data.md for
// the edge cases (Unicode tables, invalid UTF-8).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::data {

// The key of the merge of the adjacent tokens (left, right) in a BPE merge table.
constexpr std::uint64_t merge_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

class BpeTokenizer final : public Tokenizer {
 public:
  // Loads `encoder.json` and `vocab.bpe` (or the same files named vocab.json and merges.txt, as
  // Hugging Face names them) from `dir`. Missing or malformed files throw kintsugi::Error naming
  // the file and pointing at scripts/fetch_data.sh.
  static BpeTokenizer load(const std::filesystem::path& dir);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer() override;

  // Token ids of `text`, which must be valid UTF-8 (else kintsugi::Error). "<|endoftext|>" in
  // the text is ordinary text, as in the reference; documents end with eos_id() (tokenizer.hpp).
  // Thread-safe: each concurrent call borrows its own cache of merged pieces.
  using Tokenizer::encode;
  void encode_into(std::string_view text, std::vector<std::int32_t>& out) const override;

  // The exact bytes the ids stand for (possibly partial UTF-8 when ids split a character).
  // Ids outside [0, vocab_size()) throw kintsugi::Error.
  std::string decode(std::span<const std::int32_t> ids) const override;

  int vocab_size() const override;
  // <|endoftext|>, 50256 for GPT-2.
  int eot_id() const;
  std::int32_t eos_id() const override { return eot_id(); }
  std::optional<std::int32_t> bos_id() const override { return std::nullopt; }
  std::span<const std::int32_t> text_prefix() const override { return {}; }
  std::span<const std::int32_t> text_suffix() const override { return {}; }
  std::string describe() const override;
  // vocab.json and merges.txt (the files' contents unchanged) and a tokenizer_config.json.
  std::vector<std::filesystem::path> save(const std::filesystem::path& dir,
                                          std::int64_t model_max_length) const override;
  std::uint64_t fingerprint() const override;

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The printable symbol GPT-2 uses for byte b in encoder.json and vocab.bpe (UTF-8): bytes that
// are printable Latin-1 stand for themselves, the others for U+0100 + their rank among them.
std::string byte_symbol(std::uint8_t b);

}  // namespace kintsugi::data
