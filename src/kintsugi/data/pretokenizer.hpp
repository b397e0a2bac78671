#pragma once
// GPT-2's pre-tokenization: the text is cut into pieces by the reference regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and BPE then runs inside each piece. Matching uses PCRE2 (UTF, UCP, JIT) with \s spelled out
// as Python regex's set, because PCRE2 10.42's \s also matches U+180E (see docs/data.md).
#include <cstddef>
#include <memory>
#include <string_view>

namespace kintsugi::data {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern once; matching is then thread-safe
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Walks the pieces of one text in order; they concatenate back to the whole text.
  class Pieces {
   public:
    ~Pieces();
    Pieces(Pieces&&) noexcept;
    Pieces& operator=(Pieces&&) = delete;
    // Sets `piece` to the next piece; false at the end of the text.
    bool next(std::string_view& piece);

   private:
    friend class Pretokenizer;
    struct State;
    explicit Pieces(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
  };
  // `text` must be valid UTF-8 (see utf8.hpp) and outlive the returned walker.
  Pieces pieces(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace kintsugi::data
