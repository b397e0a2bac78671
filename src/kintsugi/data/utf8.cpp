#include "kintsugi/data/utf8.hpp"

#include <algorithm>
#include <cstdint>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    // Skip ASCII eight bytes at a time: almost all training text is mostly ASCII.
    while (i + 8 <= n) {
      std::uint64_t word;
      std::copy_n(s + i, 8, reinterpret_cast<unsigned char*>(&word));
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Table 3-7 of the Unicode standard: the second byte's range depends on the first byte.
    std::size_t length;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates D800..DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // continuation byte, C0/C1 (overlong) or F5..FF
    }
    if (i + length > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < length; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += length;
  }
  return std::nullopt;
}

void require_utf8(std::string_view text, std::string_view what) {
  auto bad = first_invalid_utf8(text);
  if (!bad) return;
  auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(*bad), '\n');
  fail("{}: invalid UTF-8 at line {} (byte offset {}, byte 0x{:02X}); tokenizers read "
       "Unicode text: convert the input to UTF-8 first (e.g. iconv -f latin1 -t utf-8)",
       what, line, *bad, static_cast<unsigned char>(text[*bad]));
}

void append_utf8(std::string& out, char32_t cp) {
  KINTSUGI_ASSERT(cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF));
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::size_t utf8_sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

char32_t next_code_point(std::string_view text, std::size_t& i) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data()) + i;
  const std::size_t n = utf8_sequence_length(b[0]);
  i += n;
  switch (n) {
    case 1: return b[0];
    case 2: return (char32_t(b[0] & 0x1F) << 6) | (b[1] & 0x3F);
    case 3: return (char32_t(b[0] & 0x0F) << 12) | (char32_t(b[1] & 0x3F) << 6) | (b[2] & 0x3F);
    default:
      return (char32_t(b[0] & 0x07) << 18) | (char32_t(b[1] & 0x3F) << 12) |
             (char32_t(b[2] & 0x3F) << 6) | (b[3] & 0x3F);
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string_view trim_white_space(std::string_view text, bool left, bool right) {
  if (left) {
    std::size_t i = 0, keep = 0;
    while (i < text.size() && is_white_space(next_code_point(text, i))) keep = i;
    text.remove_prefix(keep);
  }
  if (right) {
    std::size_t end = text.size();
    while (end > 0) {
      std::size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      std::size_t i = start;
      if (!is_white_space(next_code_point(text, i))) break;
      end = start;
    }
    text = text.substr(0, end);
  }
  return text;
}

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  std::size_t begin = 0;
  for (std::size_t at = text.find(pattern); !pattern.empty() && at != std::string_view::npos;
       at = text.find(pattern, begin)) {
    out.append(text.substr(begin, at - begin)).append(content);
    begin = at + pattern.size();
  }
  return out.append(text.substr(begin));
}

}  // namespace kintsugi::data
