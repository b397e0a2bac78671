#pragma once
// What every tokenizer offers, whichever files it was loaded from: GPT-2's encoder.json and
// vocab.bpe (bpe_tokenizer.hpp) or a Hugging Face tokenizer.json (hf_tokenizer.hpp).
// load_tokenizer() picks the kind from what a path holds.
//
// Documents (data tokenize, docs/data.md "Documents and special tokens"): each document is
// encoded as document_prefix() + encode(text) + document_suffix(): the specials the file's
// post-processor puts around a text (Llama 2: <s> before), then the end-of-document id unless
// the post-processor already ended with it.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` (valid UTF-8, else kintsugi::Error), without the specials a
  // post-processor adds. Thread-safe; concurrent calls run in parallel.
  virtual void encode_into(std::string_view text, std::vector<std::int32_t>& out) const = 0;
  std::vector<std::int32_t> encode(std::string_view text) const;

  // The text the ids stand for as bytes, special tokens written out; ids outside
  // [0, vocab_size()) are a kintsugi::Error.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;

  // Every id is below this.
  virtual int vocab_size() const = 0;
  // Specials the post-processor puts before and after a text (empty for GPT-2's files).
  virtual std::span<const std::int32_t> text_prefix() const = 0;
  virtual std::span<const std::int32_t> text_suffix() const = 0;
  // The end-of-document (eos) id, appended after every document.
  virtual std::int32_t eos_id() const = 0;
  // The beginning-of-sequence id, if the tokenizer names one.
  virtual std::optional<std::int32_t> bos_id() const = 0;

  // text_prefix() + encode(text) + text_suffix(): what Hugging Face's `encode(text)` gives.
  void encode_with_specials(std::string_view text, std::vector<std::int32_t>& out) const;
  // The ids of one training document (see the header comment).
  void encode_document(std::string_view text, std::vector<std::int32_t>& out) const;

  // One line for logs: kind, vocabulary size, where it came from.
  virtual std::string describe() const = 0;
  // Writes the files that reload this tokenizer here and with Hugging Face's AutoTokenizer into
  // `dir` (tokenizer.json + tokenizer_config.json, or GPT-2's vocab.json + merges.txt +
  // tokenizer_config.json) and returns their paths. tokenizer_config.json's model_max_length is
  // `model_max_length`: the context of the model the tokenizer is saved with, not the one of
  // whichever model the files came from.
  virtual std::vector<std::filesystem::path> save(const std::filesystem::path& dir,
                                                  std::int64_t model_max_length) const = 0;
  // XXH3-64 of what defines the ids, independent of file formatting: Hugging Face's
  // tokenizer.json as compact JSON with sorted keys; GPT-2's token bytes in id order and its
  // merge lines. A model's saved copy (save()) has the fingerprint of the files it came from
  // (tokenizer_identity.hpp).
  virtual std::uint64_t fingerprint() const = 0;
};

// `path` is a tokenizer.json file, or a directory holding tokenizer.json, or GPT-2's
// encoder.json + vocab.bpe (or vocab.json + merges.txt, as exports write them). kintsugi::Error
// otherwise, "<given_as>: " and what is wrong with which file: `given_as` is the flag or key
// the user gave the path as ("--tokenizer", "data.tokenizer", "--checkpoint").
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path,
                                          std::string_view given_as);

// Whether `dir` holds tokenizer files load_tokenizer() reads.
bool has_tokenizer_files(const std::filesystem::path& dir);

// Refuses, in one line naming tokenizer.json, a directory whose only tokenizer is SentencePiece's
// tokenizer.model (kintsugi does not read its protobuf: docs/data.md); `or_else` ends the
// message with the caller's other way out ("" for none). Returns if `dir` is anything else.
void refuse_sentencepiece_only(const std::filesystem::path& dir, std::string_view or_else);

}  // namespace kintsugi::data
