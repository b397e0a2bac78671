#include "kintsugi/data/pretokenizer.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {

Pretokenizer::Pretokenizer()
    : regex_(translate_pattern(kGpt2Pattern, "GPT-2's pattern"), "GPT-2's pattern") {}

Pretokenizer::Pieces Pretokenizer::pieces(std::string_view text) const {
  return Pieces(regex_.matches(text), text);
}

bool Pretokenizer::Pieces::next(std::string_view& piece) {
  std::size_t begin = 0, end = 0;
  if (offset_ >= text_.size() || !matches_.next(begin, end)) return false;
  // Every code point is a space, a letter, a number or "other", so some alternative always
  // matches right here: pieces tile the text and decoding gives back every byte.
  KINTSUGI_ASSERT(begin == offset_ && end > begin);
  piece = text_.substr(begin, end - begin);
  offset_ = end;
  return true;
}

}  // namespace kintsugi::data
