#include "kintsugi/data/text_stream.hpp"

namespace kintsugi::data {

std::size_t incomplete_utf8_tail(std::string_view text) {
  // The last byte that is not a continuation byte (10xxxxxx), within a character's reach.
  for (std::size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;
    const std::size_t wanted = byte >= 0xF0 && byte <= 0xF4   ? 4
                               : byte >= 0xE0 && byte <= 0xEF ? 3
                               : byte >= 0xC2 && byte <= 0xDF ? 2
                                                              : 1;
    return back < wanted ? back : 0;
  }
  return 0;  // continuation bytes with no lead: not the start of anything, handed out
}

TextStream::TextStream(const Tokenizer& tokenizer, const std::vector<std::int32_t>& context)
    : tokenizer_(tokenizer) {
  if (context.empty()) return;
  ids_.push_back(context.back());
  restart_at_last();
}

void TextStream::restart_at_last() {
  ids_.erase(ids_.begin(), ids_.end() - 1);
  handed_out_ = tokenizer_.decode(ids_).size();
}

std::string TextStream::push(std::int32_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_);
  // The decoders extend the text of a run by what a token adds; a text that came out shorter
  // (not expected) hands out nothing rather than bytes twice.
  if (text.size() <= handed_out_) return "";
  const std::string_view fresh = std::string_view(text).substr(handed_out_);
  std::string out(fresh.substr(0, fresh.size() - incomplete_utf8_tail(fresh)));
  handed_out_ += out.size();
  if (handed_out_ == text.size()) restart_at_last();
  return out;
}

std::string TextStream::flush() {
  if (ids_.empty()) return "";
  const std::string text = tokenizer_.decode(ids_);
  std::string out = text.size() > handed_out_ ? text.substr(handed_out_) : "";
  handed_out_ = text.size();
  return out;
}

}  // namespace kintsugi::data
