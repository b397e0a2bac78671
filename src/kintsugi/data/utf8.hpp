#pragma once
// UTF-8 validation and encoding. The tokenizer only accepts well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), so that every input has exactly one
// meaning as a sequence of code points, the way the Python reference sees a `str`.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kintsugi::data {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence, or nullopt
// when the whole text is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// Throws kintsugi::Error naming `what` (a file name, "stdin") and the line and byte offset of the
// first invalid sequence, with the fix.
void require_utf8(std::string_view text, std::string_view what);

// Appends the UTF-8 encoding of a Unicode scalar value (not a surrogate, <= U+10FFFF).
void append_utf8(std::string& out, char32_t code_point);

// Bytes of the sequence a lead byte starts (1-4; the text is valid UTF-8).
std::size_t utf8_sequence_length(unsigned char lead);
// The code point at byte `i` of valid UTF-8 text; advances `i` past it.
char32_t next_code_point(std::string_view text, std::size_t& i);
// Unicode's White_Space property (Python's and Oniguruma's \s).
bool is_white_space(char32_t c);
// `text` without its leading and/or trailing White_Space.
std::string_view trim_white_space(std::string_view text, bool left, bool right);

// Every occurrence of pattern in text replaced by content (an empty pattern replaces nothing).
std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content);

}  // namespace kintsugi::data
