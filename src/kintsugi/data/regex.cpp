#include "kintsugi/data/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {
namespace {

// Unicode's White_Space property: \s of Oniguruma and of Python's regex module. PCRE2 10.42's
// \s also matches U+180E MONGOLIAN VOWEL SEPARATOR (White_Space before Unicode 6.3).
constexpr std::string_view kWhiteSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Length of the escape starting at pattern[i] == '\\': "\x{...}", "\p{...}", "\P{...}" run to
// the closing brace, anything else is two bytes (a multi-byte character after the backslash
// is copied whole by the caller's next steps).
std::size_t escape_length(std::string_view pattern, std::size_t i) {
  if (i + 1 >= pattern.size()) return 1;
  const char c = pattern[i + 1];
  if ((c == 'x' || c == 'p' || c == 'P') && i + 2 < pattern.size() && pattern[i + 2] == '{') {
    const std::size_t close = pattern.find('}', i + 3);
    if (close != std::string_view::npos) return close + 1 - i;
  }
  return 2;
}

}  // namespace

std::string translate_pattern(std::string_view pattern, std::string_view what) {
  std::string out;
  out.reserve(pattern.size() + 64);
  int depth = 0;  // nesting of character classes
  for (std::size_t i = 0; i < pattern.size();) {
    const char c = pattern[i];
    if (c == '\\') {
      const std::size_t n = escape_length(pattern, i);
      const std::string_view escape = pattern.substr(i, n);
      if (escape == "\\s") {
        out += depth > 0 ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (escape == "\\S") {
        if (depth > 0)
          fail("{}: the pattern uses \\S inside a character class, which kintsugi cannot "
               "translate for PCRE2: {}", what, pattern);
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += escape;
      }
      i += n;
    } else if (c == '[' && depth > 0 && pattern.substr(i, 2) == "[:") {
      const std::size_t close = pattern.find(":]", i + 2);  // POSIX class such as [:alpha:]
      const std::size_t n = close == std::string_view::npos ? 1 : close + 2 - i;
      out += pattern.substr(i, n);
      i += n;
    } else if (c == '[') {
      if (depth == 0) {
        out += '[';
        ++i;
        if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
        if (i < pattern.size() && pattern[i] == ']') out += "\\]", ++i;  // literal first ']'
      } else {
        // A class nested in a class: Oniguruma's union; its members join the outer class.
        if (i + 1 < pattern.size() && pattern[i + 1] == '^')
          fail("{}: the pattern nests a negated character class, which kintsugi cannot "
               "translate for PCRE2: {}", what, pattern);
        ++i;
      }
      ++depth;
    } else if (c == ']' && depth > 0) {
      if (--depth == 0) out += ']';
      ++i;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

std::string quote_literal(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

struct Regex::Matches::State {
  const pcre2_code* code;
  pcre2_match_data* match = nullptr;
  std::string_view text;
  std::size_t offset = 0;
  ~State() { pcre2_match_data_free(match); }
};

Regex::Regex(const std::string& pcre2_pattern, std::string_view what)
    : compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()),
                                  pcre2_pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                                  &error_offset, nullptr);
  if (!compiled_->code)
    fail("{}: the pattern does not compile ({} at offset {}): {}", what, pcre2_message(error),
         error_offset, pcre2_pattern);
  // Without JIT support (some platforms) pcre2_match uses the interpreter: slower, same matches.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

Regex::Matches Regex::matches(std::string_view text) const {
  auto state = std::make_unique<Matches::State>();
  state->code = compiled_->code;
  state->match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  if (!state->match) throw std::bad_alloc();
  state->text = text;
  return Matches(std::move(state));
}

Regex::Matches::Matches(std::unique_ptr<State> state) : state_(std::move(state)) {}
Regex::Matches::~Matches() = default;
Regex::Matches::Matches(Matches&&) noexcept = default;

bool Regex::Matches::next(std::size_t& begin, std::size_t& end) {
  State& s = *state_;
  while (s.offset <= s.text.size()) {
    // The caller validated the UTF-8 once; checking it on every call would be quadratic.
    const int rc = pcre2_match(s.code, reinterpret_cast<PCRE2_SPTR>(s.text.data()),
                               s.text.size(), s.offset, PCRE2_NO_UTF_CHECK, s.match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0)
      throw std::logic_error("pattern match failed at byte " + std::to_string(s.offset) + ": " +
                             pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.match);
    begin = ovector[0];
    end = ovector[1];
    if (end > begin) {
      s.offset = end;
      return true;
    }
    // An empty match: like JavaScript's matchAll, go on one character further.
    s.offset = begin + 1;
    while (s.offset < s.text.size() && (static_cast<unsigned char>(s.text[s.offset]) & 0xC0) == 0x80)
      ++s.offset;
  }
  return false;
}

}  // namespace kintsugi::data
