#include "kintsugi/data/added_tokens.hpp"

#include "kintsugi/data/utf8.hpp"

namespace kintsugi::data {

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)), trie_(1) {
  for (std::size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    std::int32_t node = 0;
    for (char c : s) {
      const auto b = static_cast<unsigned char>(c);
      std::int32_t child = -1;
      for (const auto& [byte, index] : trie_[node].children)
        if (byte == b) child = index;
      if (child < 0) {
        child = static_cast<std::int32_t>(trie_.size());
        trie_[node].children.emplace_back(b, child);
        trie_.emplace_back();
      }
      node = child;
    }
    trie_[node].token = static_cast<std::int32_t>(t);  // a repeated content: the last one wins
  }
}

std::size_t AddedTokens::longest_at(std::string_view text, std::size_t at,
                                    std::size_t& index) const {
  std::size_t best = 0;
  std::int32_t node = 0;
  for (std::size_t i = at; i < text.size(); ++i) {
    std::int32_t child = -1;
    for (const auto& [byte, next] : trie_[node].children)
      if (byte == static_cast<unsigned char>(text[i])) child = next;
    if (child < 0) break;
    node = child;
    if (trie_[node].token >= 0) {
      best = i + 1 - at;
      index = static_cast<std::size_t>(trie_[node].token);
    }
  }
  return best;
}

void AddedTokens::split(std::string_view text, std::vector<Section>& out) const {
  out.clear();
  std::size_t start = 0;  // of the text not yet emitted
  for (std::size_t i = 0; i < text.size() && !tokens_.empty(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
    std::size_t index = 0;
    const std::size_t n = longest_at(text, i, index);
    if (n == 0) continue;
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({text.substr(i, n), tokens_[index].id});
    // The stripping the token asks for, applied to its neighbours (the reference trims the
    // sections before and after it).
    if (tokens_[index].lstrip && out.size() > 1 && out[out.size() - 2].id < 0)
      out[out.size() - 2].text = trim_white_space(out[out.size() - 2].text, false, true);
    start = i + n;
    i = start - 1;
    if (tokens_[index].rstrip) {
      const std::string_view rest = trim_white_space(text.substr(start), true, false);
      start = text.size() - rest.size();
      i = start - 1;
    }
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
}

}  // namespace kintsugi::data
