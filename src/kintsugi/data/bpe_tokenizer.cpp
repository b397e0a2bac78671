#include "kintsugi/data/bpe_tokenizer.hpp"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/data/fetched_files.hpp"
#include "kintsugi/data/piece_cache.hpp"
#include "kintsugi/data/pretokenizer.hpp"
#include "kintsugi/data/utf8.hpp"
#include "kintsugi/data/workspace_pool.hpp"

namespace kintsugi::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
// What to do about a missing or bad GPT-2 file: fetch_data.sh only for the files it makes.
std::string_view fetch_hint(const std::filesystem::path& path) {
  return hint_for(path, "run scripts/fetch_data.sh to (re)download it",
                  "name a directory with GPT-2's encoder.json and vocab.bpe");
}

// GPT-2's bytes_to_unicode(): the 188 printable Latin-1 bytes stand for themselves; the other
// 68 bytes (controls, space, 0x7F-0xA0, 0xAD) get U+0100, U+0101, ... in byte order, so every
// byte has a visible, non-space symbol in the vocabulary files.
constexpr std::array<char32_t, 256> make_byte_symbols() {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::array<char32_t, 256> symbols{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) symbols[b] = printable(b) ? char32_t(b) : next++;
  return symbols;
}
constexpr std::array<char32_t, 256> kByteSymbols = make_byte_symbols();

// The inverse: a vocabulary string (UTF-8 of byte symbols) to the bytes it stands for.
bool symbols_to_bytes(std::string_view symbols, std::string& bytes) {
  static const auto inverse = [] {
    std::array<int, 0x144> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[kByteSymbols[b]] = b;
    return table;
  }();
  bytes.clear();
  if (first_invalid_utf8(symbols)) return false;
  for (std::size_t i = 0; i < symbols.size();) {
    auto c = static_cast<unsigned char>(symbols[i]);
    char32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if (c < 0xE0) {
      cp = (char32_t(c & 0x1F) << 6) | (static_cast<unsigned char>(symbols[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // three-byte and longer sequences are beyond U+0143
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    bytes += static_cast<char>(inverse[cp]);
  }
  return true;
}

std::string read_tokenizer_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("GPT-2 tokenizer file {} is missing: {}", path.string(), fetch_hint(path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) fail("cannot read {}: {}", path.string(), fetch_hint(path));
  return std::move(contents).str();
}

template <class... Args>
[[noreturn]] void corrupt(const std::filesystem::path& path, fmt::format_string<Args...> what,
                          Args&&... args) {
  fail("{} is not a valid GPT-2 tokenizer file ({}): delete it and {}", path.string(),
       fmt::format(what, std::forward<Args>(args)...), fetch_hint(path));
}

struct Merge {
  std::int32_t rank;    // line number in vocab.bpe: lower merges first
  std::int32_t result;  // id of the concatenated token
};

}  // namespace

std::string byte_symbol(std::uint8_t b) {
  std::string s;
  append_utf8(s, kByteSymbols[b]);
  return s;
}

// The merge loop's scratch space and the cache of merged pieces, one per concurrent caller.
struct BpeWorkspace {
  struct Symbol {
    std::int32_t id;          // -1 once merged into its left neighbour
    std::int32_t next, prev;  // the list of live symbols, -1 at the ends
  };
  struct Candidate {  // a mergeable pair (left, right) starting at symbol `position`
    std::int32_t rank, position, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : position > o.position;
    }
  };
  PieceCache cache;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap, batch;
};

struct BpeTokenizer::Impl {
  Pretokenizer pretokenizer;
  std::vector<std::string> token_bytes;  // id -> the bytes it decodes to
  std::array<std::int32_t, 256> byte_token{};
  std::unordered_map<std::uint64_t, Merge> merges;
  std::int32_t eot = -1;
  std::string encoder_json, vocab_bpe;  // the files as read, for save()
  std::filesystem::path dir;
  mutable WorkspacePool<BpeWorkspace> workspaces;

  void load_encoder(const std::filesystem::path& path,
                    std::unordered_map<std::string, std::int32_t>& bytes_to_id);
  void load_merges(const std::filesystem::path& path,
                   const std::unordered_map<std::string, std::int32_t>& bytes_to_id);
  void bpe(std::string_view piece, BpeWorkspace& w, std::vector<std::int32_t>& out) const;
  void push_candidate(BpeWorkspace& w, std::int32_t position) const;
};

void BpeTokenizer::Impl::load_encoder(const std::filesystem::path& path,
                                      std::unordered_map<std::string, std::int32_t>& bytes_to_id) {
  nlohmann::json json;
  try {
    encoder_json = read_tokenizer_file(path);
    json = nlohmann::json::parse(encoder_json);
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, "not JSON: {}", e.what());
  }
  if (!json.is_object() || json.empty()) corrupt(path, "expected a JSON object of token ids");
  token_bytes.assign(json.size(), {});
  std::vector<std::string> token_of(json.size());  // id -> its symbols
  std::vector<bool> seen(json.size(), false);
  std::string bytes;
  for (const auto& [symbols, value] : json.items()) {
    if (!value.is_number_integer()) corrupt(path, "the id of \"{}\" is not an integer", symbols);
    auto id = value.get<std::int64_t>();
    if (id < 0 || id >= static_cast<std::int64_t>(json.size()))
      corrupt(path, "the id of \"{}\" is {}: ids must be 0..{}", symbols, id, json.size() - 1);
    if (seen[id])
      corrupt(path, "tokens \"{}\" and \"{}\" both have the id {}: ids must be 0..{} without "
              "repeats", token_of[id], symbols, id, json.size() - 1);
    seen[id] = true;
    token_of[id] = symbols;
    if (!symbols_to_bytes(symbols, bytes))
      corrupt(path, "\"{}\" is not made of GPT-2 byte symbols", symbols);
    if (symbols == kEndOfText) eot = static_cast<std::int32_t>(id);
    token_bytes[id] = bytes;
    bytes_to_id.emplace(bytes, static_cast<std::int32_t>(id));
  }
  if (eot < 0) corrupt(path, "no {} token", kEndOfText);
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id.end()) corrupt(path, "no token for byte 0x{:02X}", b);
    byte_token[b] = it->second;
  }
}

void BpeTokenizer::Impl::load_merges(
    const std::filesystem::path& path,
    const std::unordered_map<std::string, std::int32_t>& bytes_to_id) {
  vocab_bpe = read_tokenizer_file(path);
  std::string_view rest = vocab_bpe;
  auto next_line = [&rest] {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    return line;
  };
  if (!next_line().starts_with("#version")) corrupt(path, "first line is not \"#version: ...\"");
  std::int32_t rank = 0;
  std::string left, right;
  for (int line_number = 2; !rest.empty(); ++line_number) {
    std::string_view line = next_line();
    if (line.empty()) continue;
    auto space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      corrupt(path, "line {} is not two symbol strings separated by one space", line_number);
    auto l = bytes_to_id.end(), r = l, merged = l;
    if (symbols_to_bytes(line.substr(0, space), left) &&
        symbols_to_bytes(line.substr(space + 1), right)) {
      l = bytes_to_id.find(left);
      r = bytes_to_id.find(right);
      merged = bytes_to_id.find(left + right);
    }
    if (l == bytes_to_id.end() || r == bytes_to_id.end() || merged == bytes_to_id.end())
      corrupt(path, "line {} merges tokens missing from encoder.json", line_number);
    // A repeated pair takes its last rank, as the reference's dict(zip(merges, range(n))) does.
    merges[merge_key(l->second, r->second)] = Merge{rank++, merged->second};
  }
  if (merges.empty()) corrupt(path, "no merges");
}

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& dir) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  std::unordered_map<std::string, std::int32_t> bytes_to_id;
  // Hugging Face's names for the same two files (exports write these).
  const bool hf_names = !std::filesystem::exists(dir / "encoder.json") &&
                        std::filesystem::exists(dir / "vocab.json");
  impl->load_encoder(dir / (hf_names ? "vocab.json" : "encoder.json"), bytes_to_id);
  impl->load_merges(dir / (hf_names ? "merges.txt" : "vocab.bpe"), bytes_to_id);
  return BpeTokenizer(std::move(impl));
}

std::string BpeTokenizer::describe() const {
  return fmt::format("GPT-2 byte-level BPE from {} ({} ids)", impl_->dir.string(), vocab_size());
}

// The token bytes in id order (each after its length) and the merge lines without the
// "#version" line and blank lines: encoder.json and vocab.json of the same vocabulary agree.
std::uint64_t BpeTokenizer::fingerprint() const {
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  for (const std::string& bytes : impl_->token_bytes) {
    const std::uint64_t n = bytes.size();
    XXH3_64bits_update(state, &n, sizeof n);
    XXH3_64bits_update(state, bytes.data(), bytes.size());
  }
  std::string_view rest = impl_->vocab_bpe;
  for (bool first = true; !rest.empty(); first = false) {
    const auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first || line.empty()) continue;
    XXH3_64bits_update(state, line.data(), line.size());
    XXH3_64bits_update(state, "\n", 1);
  }
  const std::uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

std::vector<std::filesystem::path> BpeTokenizer::save(const std::filesystem::path& dir,
                                                      std::int64_t model_max_length) const {
  write_text_file(dir / "vocab.json", impl_->encoder_json);
  write_text_file(dir / "merges.txt", impl_->vocab_bpe);
  const std::string eot(kEndOfText);
  const nlohmann::json config = {{"tokenizer_class", "GPT2Tokenizer"}, {"bos_token", eot},
                                 {"eos_token", eot}, {"unk_token", eot},
                                 {"add_prefix_space", false},
                                 {"model_max_length", model_max_length}};
  write_text_file(dir / "tokenizer_config.json", config.dump(2) + "\n");
  return {dir / "vocab.json", dir / "merges.txt", dir / "tokenizer_config.json"};
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

int BpeTokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }
int BpeTokenizer::eot_id() const { return impl_->eot; }

void BpeTokenizer::Impl::push_candidate(BpeWorkspace& w, std::int32_t position) const {
  auto& symbols = w.symbols;
  auto& heap = w.heap;
  const BpeWorkspace::Symbol& s = symbols[position];
  if (s.next < 0) return;
  auto it = merges.find(merge_key(s.id, symbols[s.next].id));
  if (it == merges.end()) return;
  heap.push_back({it->second.rank, position, s.id, symbols[s.next].id});
  std::push_heap(heap.begin(), heap.end(), std::greater<>{});
}

// The reference repeatedly takes the lowest-ranked adjacent pair and merges all its
// non-overlapping occurrences left to right in one pass, then looks again. A heap ordered by
// (rank, position) does the same in O(n log n) instead of O(n^2): all entries of the lowest
// rank are taken as one batch in left-to-right order, and pairs created by that batch (which can
// never have the batch's own rank, since a merged token is longer than either part) wait for the
// next round, exactly like the reference's next pass. Stale entries are recognised by their ids:
// a symbol's token only ever grows, so an id never comes back.
void BpeTokenizer::Impl::bpe(std::string_view piece, BpeWorkspace& w,
                             std::vector<std::int32_t>& out) const {
  auto& symbols = w.symbols;
  auto& heap = w.heap;
  auto& batch = w.batch;
  const auto n = static_cast<std::int32_t>(piece.size());
  symbols.resize(n);
  for (std::int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_token[static_cast<unsigned char>(piece[i])], i + 1 < n ? i + 1 : -1, i - 1};
  heap.clear();
  for (std::int32_t i = 0; i + 1 < n; ++i) push_candidate(w, i);
  while (!heap.empty()) {
    batch.clear();
    const std::int32_t rank = heap.front().rank;
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      batch.push_back(heap.back());
      heap.pop_back();
    }
    for (const BpeWorkspace::Candidate& c : batch) {
      BpeWorkspace::Symbol& left = symbols[c.position];
      if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
      BpeWorkspace::Symbol& right = symbols[left.next];
      left.id = merges.find(merge_key(c.left, c.right))->second.result;
      right.id = -1;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.position;
      if (left.prev >= 0) push_candidate(w, left.prev);
      push_candidate(w, c.position);
    }
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<std::int32_t>& out) const {
  require_utf8(text, "text to encode");
  const Impl& m = *impl_;
  auto w = m.workspaces.borrow();
  auto pieces = m.pretokenizer.pieces(text);
  std::string_view piece;
  while (pieces.next(piece)) {
    if (piece.size() == 1) {
      out.push_back(m.byte_token[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (w->cache.get(piece, out)) continue;
    std::size_t first = out.size();
    m.bpe(piece, *w, out);
    w->cache.put(piece, std::span(out).subspan(first));
  }
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  const auto& table = impl_->token_bytes;
  std::string text;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= static_cast<std::int32_t>(table.size()))
      fail("token id {} is out of range: this tokenizer's ids are 0..{}", id, table.size() - 1);
    text += table[id];
  }
  return text;
}

}  // namespace kintsugi::data
