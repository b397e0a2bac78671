// Streaming the text of generated ids (data/text_stream.hpp): the pieces `generate` prints add
// up to the decoded sequence, spaces included, on SentencePiece-style tokenizers whose decoder
// drops the first token's leading space, and a character split over byte-fallback tokens is
// printed whole once its last byte arrives.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "kintsugi/data/text_stream.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "kintsugi/data/utf8.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using kintsugi::data::TextStream;
using Ids = std::vector<std::int32_t>;

namespace {

using kintsugi::testing::data_dir;
using kintsugi::testing::fixtures_dir;

// The pieces of `ids` streamed after `context`, one per id, and the held bytes at the end.
std::vector<std::string> stream(const kintsugi::data::Tokenizer& tokenizer, const Ids& context,
                                const Ids& ids) {
  TextStream text(tokenizer, context);
  std::vector<std::string> pieces;
  for (std::int32_t id : ids) pieces.push_back(text.push(id));
  pieces.push_back(text.flush());
  return pieces;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string all;
  for (const auto& p : pieces) all += p;
  return all;
}

}  // namespace

// tiny_hf: Metaspace "▁" for spaces, byte fallback, the Llama 2 decoder (Replace, ByteFallback,
// Fuse, Strip one leading space).
TEST(TextStream, KeepsTheSpacesASentencePieceDecoderDropsFromALoneToken) {
  const auto tokenizer = kintsugi::data::load_tokenizer(
      fs::path(fixtures_dir()) / "tokenizer" / "tiny_hf", "--tokenizer");
  const Ids context = {1, 12};           // <s> "▁fi"
  const Ids ids = {12, 4, 7, 4, 8, 6};  // "▁fi" "▁" "ab" "▁" "aba" "b"
  const Ids one = {12};
  ASSERT_EQ(tokenizer->decode(one), "fi");  // a token on its own loses its space
  Ids all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  ASSERT_EQ(tokenizer->decode(all), "<s> fi fi ab abab");
  const auto pieces = stream(*tokenizer, context, ids);
  EXPECT_EQ(pieces, (std::vector<std::string>{" fi", " ", "ab", " ", "aba", "b", ""}));
  // From a context of just <s> (an empty prompt) as well.
  EXPECT_EQ(joined(stream(*tokenizer, {1}, ids)), " fi ab abab");
}

TEST(TextStream, HoldsBackACharacterUntilItsLastByte) {
  const auto tokenizer = kintsugi::data::load_tokenizer(
      fs::path(fixtures_dir()) / "tokenizer" / "tiny_hf", "--tokenizer");
  // "▁fi" then "€" as the three fallback bytes E2 82 AC, then "▁fi".
  const auto pieces = stream(*tokenizer, {1}, {12, 14, 15, 16, 12});
  EXPECT_EQ(pieces, (std::vector<std::string>{" fi", "", "", "\u20ac", " fi", ""}));
  // Ended inside the character: its bytes come out at the end, as they are.
  EXPECT_EQ(stream(*tokenizer, {1}, {12, 14, 15}),
            (std::vector<std::string>{" fi", "", "", "\xe2\x82"}));
}

TEST(TextStream, IncompleteUtf8Tail) {
  using kintsugi::data::incomplete_utf8_tail;
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("ab"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xe2"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82\xac"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xf0\x9f\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("\x82\xac"), 0u);  // no lead byte: nothing to wait for
  EXPECT_EQ(incomplete_utf8_tail("a\xff"), 0u);     // never a lead byte
}

// The testers' case: Llama 2 printed "The jury said thatthework,..." one token at a time.
TEST(TextStream, Llama2TextHasItsSpaces) {
  const auto tokenizer = kintsugi::data::load_tokenizer(
      fs::path(data_dir()) / "llama2-tokenizer", "--tokenizer");
  const std::string prompt = "The jury said";
  const std::string rest = " that the work, a d\u00e9j\u00e0 vu \u2603 of 1962.";
  const Ids prompt_ids = tokenizer->encode(prompt);
  const Ids all = tokenizer->encode(prompt + rest);
  ASSERT_TRUE(std::equal(prompt_ids.begin(), prompt_ids.end(), all.begin()));
  Ids context(tokenizer->text_prefix().begin(), tokenizer->text_prefix().end());
  context.insert(context.end(), prompt_ids.begin(), prompt_ids.end());
  const Ids ids(all.begin() + static_cast<std::ptrdiff_t>(prompt_ids.size()), all.end());
  const std::string text = joined(stream(*tokenizer, context, ids));
  EXPECT_EQ(text, rest);
  EXPECT_FALSE(kintsugi::data::first_invalid_utf8(text).has_value());
  // Without a prompt (`generate` then streams from no context): the text a decode gives.
  EXPECT_EQ(joined(stream(*tokenizer, {}, all)), prompt + rest);
}

// GPT-2's byte-level decoder: every piece is the token's own bytes, as before.
TEST(TextStream, Gpt2PiecesAreItsTokens) {
  const auto tokenizer = kintsugi::data::load_tokenizer(
      fs::path(data_dir()) / "gpt2-tokenizer", "--tokenizer");
  const Ids context = tokenizer->encode("The jury said");
  const Ids ids = tokenizer->encode(" that the work, \u2603 of 1962.");
  EXPECT_EQ(joined(stream(*tokenizer, context, ids)), " that the work, \u2603 of 1962.");
}
