#include "kintsugi/data/hf_bpe.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::data {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 ▁
constexpr char32_t kCharTableSize = 0x30000;              // planes 0-2: CJK, emoji, ...

// The code point a symbol (valid UTF-8) starts with.
char32_t decode_one(std::string_view s) {
  std::size_t i = 0;
  return next_code_point(s, i);
}

// GPT-2's byte symbols (bpe_tokenizer.hpp) as UTF-8, once.
const std::string& symbol_of_byte(unsigned char b) {
  static const auto table = [] {
    std::array<std::string, 256> t;
    for (int i = 0; i < 256; ++i) t[i] = byte_symbol(static_cast<std::uint8_t>(i));
    return t;
  }();
  return table[b];
}

}  // namespace

HfBpe::HfBpe(HfBpe&&) noexcept = default;
HfBpe::~HfBpe() = default;

HfBpe::HfBpe(const nlohmann::json& model,
             const std::unordered_map<std::string, std::int32_t>& vocab, bool byte_level,
             std::string_view what)
    : vocab_(vocab), byte_level_(byte_level) {
  auto flag = [&](const char* key) {
    auto it = model.find(key);
    if (it == model.end() || it->is_null()) return false;
    if (!it->is_boolean()) fail("{}: model.{} must be true or false", what, key);
    return it->get<bool>();
  };
  byte_fallback_ = flag("byte_fallback");
  fuse_unk_ = flag("fuse_unk");
  ignore_merges_ = flag("ignore_merges");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (auto it = model.find(key); it != model.end() && !it->is_null() && *it != "")
      fail("{}: BPE with model.{} (subword prefixes/suffixes) is not supported", what, key);
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && it->get<double>() > 0)
    fail("{}: BPE dropout is for training tokenizers; set model.dropout to null", what);
  if (auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
    auto id = vocab.find(it->get<std::string>());
    if (id == vocab.end()) fail("{}: model.unk_token {} is not in the vocabulary", what, it->dump());
    unk_ = id->second;
  }

  // Merges: "left right" strings, or [left, right] pairs since tokenizers 0.20.
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array())
    fail("{}: model.merges must be a list of merges", what);
  bool splittable = true;
  for (std::size_t rank = 0; rank < merges->size(); ++rank) {
    const auto& m = (*merges)[rank];
    std::string left, right;
    if (m.is_string()) {
      const auto text = m.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        fail("{}: merge {} \"{}\" is not two tokens separated by one space", what, rank, text);
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("{}: merge {} is neither \"left right\" nor [left, right]", what, rank);
    }
    auto l = vocab.find(left), r = vocab.find(right), joined = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || joined == vocab.end())
      fail("{}: merge {} ({} + {}) uses or makes a token missing from the vocabulary", what,
           rank, left, right);
    // A repeated pair takes its last rank, as the reference's Map does.
    merges_[merge_key(l->second, r->second)] = {static_cast<std::int32_t>(rank), joined->second};
    if (right.starts_with(kMetaspace) && !left.ends_with(kMetaspace)) splittable = false;
  }
  split_at_metaspace_ = !byte_level_ && splittable;

  char_id_.assign(byte_level_ ? 0 : kCharTableSize, -1);
  byte_symbol_id_.fill(-1);
  fallback_id_.fill(-1);
  for (const auto& [token, id] : vocab) {
    if (!byte_level_ && !token.empty() &&
        utf8_sequence_length(static_cast<unsigned char>(token[0])) == token.size()) {
      const char32_t cp = decode_one(token);
      if (cp < kCharTableSize) char_id_[cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_level_)
      if (auto it = vocab.find(byte_symbol(static_cast<std::uint8_t>(b))); it != vocab.end())
        byte_symbol_id_[b] = it->second;
    if (auto it = vocab.find(fmt::format("<0x{:02X}>", b)); it != vocab.end())
      fallback_id_[b] = it->second;
  }
}

std::int32_t HfBpe::symbol_id(std::string_view symbol) const {
  const char32_t cp = decode_one(symbol);
  if (cp < kCharTableSize) return char_id_[cp];
  auto it = vocab_.find(std::string(symbol));
  return it == vocab_.end() ? -1 : it->second;
}

// A symbol missing from the vocabulary: its UTF-8 bytes as <0xXX> tokens when the file has
// byte_fallback and all of them exist, else the unknown token.
void HfBpe::emit_unknown(std::string_view symbol, std::vector<std::int32_t>& out) const {
  if (byte_fallback_ &&
      std::all_of(symbol.begin(), symbol.end(),
                  [&](char c) { return fallback_id_[static_cast<unsigned char>(c)] >= 0; })) {
    for (char c : symbol) out.push_back(fallback_id_[static_cast<unsigned char>(c)]);
    return;
  }
  if (!unk_)
    fail("the text holds \"{}\", which this tokenizer has no token for and no unk_token to "
         "stand in for it", symbol);
  out.push_back(*unk_);
}

void HfBpe::fuse_unknown(std::vector<std::int32_t>& out, std::size_t first) const {
  if (!fuse_unk_ || !unk_) return;
  auto end = std::unique(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                         [&](std::int32_t a, std::int32_t b) { return a == *unk_ && b == *unk_; });
  out.erase(end, out.end());
}

void HfBpe::push_candidate(HfBpeWorkspace& w, std::int32_t position) const {
  const auto& s = w.symbols[position];
  if (s.next < 0 || s.id < 0) return;
  const std::int32_t right = w.symbols[s.next].id;
  if (right < 0) return;
  auto it = merges_.find(merge_key(s.id, right));
  if (it == merges_.end()) return;
  w.heap.push_back({it->second.rank, position, s.id, right});
  std::push_heap(w.heap.begin(), w.heap.end(), std::greater<>{});
}

// Pops the lowest (rank, position) pair until none is left. An entry is stale when its left
// symbol has merged since (its id grew) or its right neighbour changed; a symbol's token only
// ever grows, so comparing ids is enough.
void HfBpe::merge_symbols(HfBpeWorkspace& w) const {
  auto& symbols = w.symbols;
  while (!w.heap.empty()) {
    std::pop_heap(w.heap.begin(), w.heap.end(), std::greater<>{});
    const HfBpeWorkspace::Candidate c = w.heap.back();
    w.heap.pop_back();
    auto& left = symbols[c.position];
    if (left.dead || left.id != c.left || left.next < 0 || symbols[left.next].id != c.right)
      continue;
    auto& right = symbols[left.next];
    left.id = merges_.find(merge_key(c.left, c.right))->second.result;
    right.dead = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.position;
    if (left.prev >= 0) push_candidate(w, left.prev);
    push_candidate(w, c.position);
  }
}

void HfBpe::encode_segment(std::string_view segment, HfBpeWorkspace& w,
                           std::vector<std::int32_t>& out) const {
  if (segment.empty() || w.cache.get(segment, out)) return;
  const std::size_t first = out.size();
  auto& symbols = w.symbols;
  symbols.clear();
  for (std::size_t i = 0; i < segment.size();) {
    const std::size_t n =
        byte_level_ ? 1 : utf8_sequence_length(static_cast<unsigned char>(segment[i]));
    std::int32_t id = byte_level_ ? byte_symbol_id_[static_cast<unsigned char>(segment[i])]
                                  : symbol_id(segment.substr(i, n));
    if (id < 0) id = -2 - static_cast<std::int32_t>(i);
    const auto k = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, k + 1, k - 1, false});
    i += n;
  }
  symbols.back().next = -1;
  w.heap.clear();
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i)
    push_candidate(w, i);
  merge_symbols(w);
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::int32_t id = symbols[i].id;
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const std::size_t at = static_cast<std::size_t>(-2 - id);
    const auto lead = static_cast<unsigned char>(segment[at]);
    if (byte_level_)
      emit_unknown(symbol_of_byte(lead), out);
    else
      emit_unknown(segment.substr(at, utf8_sequence_length(lead)), out);
  }
  w.cache.put(segment, std::span(out).subspan(first));
}

void HfBpe::encode(std::string_view piece, HfBpeWorkspace& w,
                   std::vector<std::int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string& symbols = w.scratch;
    symbols.clear();
    if (byte_level_)
      for (char c : piece) symbols += symbol_of_byte(static_cast<unsigned char>(c));
    else
      symbols = piece;
    if (auto it = vocab_.find(symbols); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (!split_at_metaspace_) return encode_segment(piece, w, out);
  // Cut before every "▁" that follows another character.
  std::size_t begin = 0;
  for (std::size_t at = piece.find(kMetaspace, 1); at != std::string_view::npos;
       at = piece.find(kMetaspace, at + kMetaspace.size())) {
    if (piece.substr(0, at).ends_with(kMetaspace)) continue;
    encode_segment(piece.substr(begin, at - begin), w, out);
    begin = at;
  }
  encode_segment(piece.substr(begin), w, out);
}

}  // namespace kintsugi::data
