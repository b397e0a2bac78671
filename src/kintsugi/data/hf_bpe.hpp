#pragma once
// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}), with the
// reference's merge order: the adjacent pair of lowest merge rank is merged first, the
// leftmost one among equal ranks, one pair at a time (tokenizers' word.rs and transformers.js
// do the same with a priority queue). Options the file may set:
//   byte level     (a ByteLevel pre-tokenizer): symbols are bytes, written as GPT-2's byte
//                  symbols in the vocabulary; otherwise symbols are Unicode code points
//   byte_fallback  a symbol missing from the vocabulary becomes its UTF-8 bytes' <0xXX> tokens
//   unk_token      ... or the unknown token, consecutive ones fused into one with fuse_unk
//   ignore_merges  a piece that is a vocabulary entry as a whole is taken as is (Llama 3)
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kintsugi/data/piece_cache.hpp"

namespace kintsugi::data {

// encode()'s scratch space and its cache of merged pieces; one per concurrent caller.
struct HfBpeWorkspace {
  struct Symbol {
    std::int32_t id;          // < -1: unknown symbol starting at byte -(id + 2) of the segment
    std::int32_t next, prev;  // the list of live symbols, -1 at the ends
    bool dead;                // merged into its left neighbour
  };
  struct Candidate {  // the pair (left, right) whose left symbol starts at `position`
    std::int32_t rank, position, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : position > o.position;
    }
  };
  PieceCache cache;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string scratch;
};

class HfBpe {
 public:
  // `model` is the file's "model" object; `vocab` maps every token string (the model's and the
  // added tokens) to its id. kintsugi::Error naming `what` on anything malformed or unsupported.
  HfBpe(const nlohmann::json& model, const std::unordered_map<std::string, std::int32_t>& vocab,
        bool byte_level, std::string_view what);
  HfBpe(HfBpe&&) noexcept;
  ~HfBpe();

  // Appends the ids of one pre-tokenized piece (raw UTF-8; byte-level models map the bytes to
  // their symbols themselves).
  void encode(std::string_view piece, HfBpeWorkspace& w, std::vector<std::int32_t>& out) const;
  // Replaces runs of the unknown id in out[first:] by one (fuse_unk; no-op otherwise).
  void fuse_unknown(std::vector<std::int32_t>& out, std::size_t first) const;

  bool byte_level() const { return byte_level_; }

 private:
  struct Merge {
    std::int32_t rank, result;
  };
  void merge_symbols(HfBpeWorkspace& w) const;
  void push_candidate(HfBpeWorkspace& w, std::int32_t position) const;
  void encode_segment(std::string_view segment, HfBpeWorkspace& w,
                      std::vector<std::int32_t>& out) const;
  void emit_unknown(std::string_view symbol, std::vector<std::int32_t>& out) const;
  std::int32_t symbol_id(std::string_view symbol) const;

  const std::unordered_map<std::string, std::int32_t>& vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::vector<std::int32_t> char_id_;  // code point -> id (-1: none), for small code points
  std::array<std::int32_t, 256> byte_symbol_id_{};  // byte level: byte -> id of its symbol
  std::array<std::int32_t, 256> fallback_id_{};     // byte -> id of <0xXX> (-1: none)
  std::optional<std::int32_t> unk_;
  bool byte_level_ = false, byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  // Code-point models whose merges never join a symbol ending in another character with one
  // starting with "▁": pieces are cut before each such "▁" and the parts merged (and cached)
  // separately, with the same result as merging the whole piece (SentencePiece-style files have
  // no pre-tokenizer, so a piece is a whole document otherwise).
  bool split_at_metaspace_ = false;
};

}  // namespace kintsugi::data
