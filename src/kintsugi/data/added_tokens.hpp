#pragma once
// The "added_tokens" of a Hugging Face tokenizer.json (specials such as <s>, <|end_of_text|>):
// found in the raw text before anything else, leftmost and then longest first, and encoded as
// their own ids; the text between them goes through the normalizer, pre-tokenizer and model.
// lstrip / rstrip remove the white space before / after such a token.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::data {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false;
};

class AddedTokens {
 public:
  explicit AddedTokens(std::vector<AddedToken> tokens);

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  struct Section {
    std::string_view text;
    std::int32_t id;  // the added token's id, or -1 for text between added tokens
  };
  // The text cut into sections (none empty before stripping), in order.
  void split(std::string_view text, std::vector<Section>& out) const;

 private:
  // Length of the longest token starting at text[at] (0: none), and its index.
  std::size_t longest_at(std::string_view text, std::size_t at, std::size_t& index) const;
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;
    std::int32_t token = -1;  // index into tokens_ of the token ending here
  };
  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace kintsugi::data
