#pragma once
// A Hugging Face tokenizer.json (and the tokenizer_config.json next to it, when present) with
// the ids of the reference implementation: the added tokens are cut out of the text first,
// the rest goes through the file's normalizer, pre-tokenizer and BPE model; the post-processor
// names the specials around a text, the decoder turns ids back into text. This covers
// byte-level BPE (GPT-2, Llama 3, Qwen, BLOOM) and SentencePiece-style BPE with "▁" and byte
// fallback (Llama 1/2, Mistral). Other model types (WordPiece, Unigram) are refused by name.
// See docs/data.md for the exact rules and the places where we knowingly differ.
#include <filesystem>
#include <memory>

#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::data {

class HfTokenizer final : public Tokenizer {
 public:
  // `json_path` is the tokenizer.json; tokenizer_config.json is read from the same directory
  // if it exists. kintsugi::Error naming the file and the problem otherwise.
  static std::unique_ptr<HfTokenizer> load(const std::filesystem::path& json_path);
  ~HfTokenizer() override;

  void encode_into(std::string_view text, std::vector<std::int32_t>& out) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  int vocab_size() const override;
  std::span<const std::int32_t> text_prefix() const override;
  std::span<const std::int32_t> text_suffix() const override;
  std::int32_t eos_id() const override;
  std::optional<std::int32_t> bos_id() const override;
  std::string describe() const override;
  std::vector<std::filesystem::path> save(const std::filesystem::path& dir,
                                          std::int64_t model_max_length) const override;
  std::uint64_t fingerprint() const override;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kintsugi::data
