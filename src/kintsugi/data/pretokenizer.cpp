#include "kintsugi/data/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {
namespace {

// Python regex's \s: exactly Unicode's White_Space property. PCRE2 10.42 adds U+180E MONGOLIAN
// VOWEL SEPARATOR (no longer White_Space since Unicode 6.3), which would split " \u180E" where
// the reference keeps it whole. Neither counts U+001C..U+001F as space (Python's str.isspace
// does, but the reference uses the regex module, not str methods).
constexpr std::string_view kSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string gpt2_pattern() {
  std::string s(kSpace);
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + s + R"(\p{L}\p{N}]+|[)" + s +
         R"(]+(?![^)" + s + R"(])|[)" + s + "]+";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

struct Pretokenizer::Pieces::State {
  const pcre2_code* code;
  pcre2_match_data* match = nullptr;
  std::string_view text;
  std::size_t offset = 0;
  ~State() { pcre2_match_data_free(match); }
};

Pretokenizer::Pretokenizer() : compiled_(std::make_unique<Compiled>()) {
  std::string pattern = gpt2_pattern();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!compiled_->code)
    throw std::logic_error("GPT-2 pattern does not compile: " + pcre2_message(error));
  // Without JIT support (some platforms) pcre2_match falls back to the interpreter: slower,
  // same pieces.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

Pretokenizer::Pieces Pretokenizer::pieces(std::string_view text) const {
  auto state = std::make_unique<Pieces::State>();
  state->code = compiled_->code;
  state->match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  if (!state->match) throw std::bad_alloc();
  state->text = text;
  return Pieces(std::move(state));
}

Pretokenizer::Pieces::Pieces(std::unique_ptr<State> state) : state_(std::move(state)) {}
Pretokenizer::Pieces::~Pieces() = default;
Pretokenizer::Pieces::Pieces(Pieces&&) noexcept = default;

bool Pretokenizer::Pieces::next(std::string_view& piece) {
  State& s = *state_;
  if (s.offset >= s.text.size()) return false;
  // The caller validated the UTF-8 once; checking it again on every call would be quadratic.
  int rc = pcre2_match(s.code, reinterpret_cast<PCRE2_SPTR>(s.text.data()), s.text.size(),
                       s.offset, PCRE2_NO_UTF_CHECK, s.match, nullptr);
  if (rc < 0)
    throw std::logic_error("GPT-2 pattern failed at byte " + std::to_string(s.offset) + ": " +
                           pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.match);
  // Every code point is a space, a letter, a number or "other", so some alternative always
  // matches right here: pieces tile the text and decoding gives back every byte.
  KINTSUGI_ASSERT(ovector[0] == s.offset && ovector[1] > s.offset);
  piece = s.text.substr(ovector[0], ovector[1] - ovector[0]);
  s.offset = ovector[1];
  return true;
}

}  // namespace kintsugi::data
