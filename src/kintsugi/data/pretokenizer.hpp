#pragma once
// GPT-2's pre-tokenization: the text is cut into pieces by the reference regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and BPE then runs inside each piece. Matching uses regex.hpp (PCRE2 with \s spelled out as
// Python regex's set, because PCRE2 10.42's \s also matches U+180E; see docs/data.md).
#include <cstddef>
#include <memory>
#include <string_view>

#include "kintsugi/data/regex.hpp"

namespace kintsugi::data {

// The pattern as tokenizer files write it (Hugging Face's ByteLevel pre-tokenizer uses it too).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern once; matching is then thread-safe

  // Walks the pieces of one text in order; they concatenate back to the whole text.
  class Pieces {
   public:
    // Sets `piece` to the next piece; false at the end of the text.
    bool next(std::string_view& piece);

   private:
    friend class Pretokenizer;
    Pieces(Regex::Matches matches, std::string_view text)
        : matches_(std::move(matches)), text_(text) {}
    Regex::Matches matches_;
    std::string_view text_;
    std::size_t offset_ = 0;
  };
  // `text` must be valid UTF-8 (see utf8.hpp) and outlive the returned walker.
  Pieces pieces(std::string_view text) const;

 private:
  Regex regex_;
};

}  // namespace kintsugi::data
