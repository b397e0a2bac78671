#pragma once
// Regular expressions of tokenizer files, matched with PCRE2 (UTF, UCP, JIT).
//
// Tokenizer files are written for Oniguruma (Hugging Face's tokenizers library) or Python's
// `regex` module; PCRE2 reads the same syntax with two differences that change pieces, both
// fixed when the pattern is compiled (see docs/data.md):
//   - `\s` is Unicode's White_Space property in Oniguruma and Python; PCRE2 10.42 adds U+180E.
//     `\s` and `\S` are spelled out as the White_Space list.
//   - Oniguruma allows a class inside a class (`[^(\s|[.,])]`, BLOOM's pattern) meaning their
//     union; PCRE2 would read the inner `[` as a literal. Inner classes are flattened.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace kintsugi::data {

// `pattern` rewritten for PCRE2 as described above; kintsugi::Error naming `what` for
// constructs we cannot translate (`\S` or a negated class inside a class).
std::string translate_pattern(std::string_view pattern, std::string_view what);

// PCRE2-quoted literal text.
std::string quote_literal(std::string_view text);

class Regex {
 public:
  // `pcre2_pattern` in PCRE2 syntax (after translate_pattern); kintsugi::Error naming `what` if
  // it does not compile.
  Regex(const std::string& pcre2_pattern, std::string_view what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Walks the non-overlapping matches of one text, left to right (empty matches are skipped).
  // Thread-safe: each walker owns its match data.
  class Matches {
   public:
    ~Matches();
    Matches(Matches&&) noexcept;
    Matches& operator=(Matches&&) = delete;
    // Sets [begin, end) to the next match; false when there is none.
    bool next(std::size_t& begin, std::size_t& end);

   private:
    friend class Regex;
    struct State;
    explicit Matches(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
  };
  // `text` must be valid UTF-8 and outlive the walker.
  Matches matches(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace kintsugi::data
