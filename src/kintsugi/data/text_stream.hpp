#pragma once
// The text of ids that arrive one at a time (`generate` prints each sampled token as it comes).
// A token decoded on its own is not its share of the text: SentencePiece-style decoders (Llama,
// Mistral) drop the leading space of the first token they see, so "▁the" alone is "the" and
// words printed one by one run together; a character split over byte-fallback tokens is a
// fragment of bytes until its last token arrives. So each new id is decoded after the ids
// before it and only the bytes beyond their text are new, and bytes that end in an incomplete
// UTF-8 character are held back until the rest of it arrives. To keep each step short, the
// decoded run restarts from the newest id once everything before it has been handed out.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kintsugi/data/tokenizer.hpp"

namespace kintsugi::data {

class TextStream {
 public:
  // `context`: the ids before the first push (a prompt, whose text the caller has shown).
  TextStream(const Tokenizer& tokenizer, const std::vector<std::int32_t>& context);

  // The text `id` adds, up to the last complete UTF-8 character.
  std::string push(std::int32_t id);
  // The bytes held back (an incomplete character at the end), handed out as they are.
  std::string flush();

 private:
  void restart_at_last();
  const Tokenizer& tokenizer_;
  std::vector<std::int32_t> ids_;  // the decoded run: the ids since the last restart
  std::size_t handed_out_ = 0;     // bytes of decode(ids_) already returned
};

// Bytes at the end of `text` that begin a UTF-8 character without finishing it (0-3).
std::size_t incomplete_utf8_tail(std::string_view text);

}  // namespace kintsugi::data
