#pragma once
// Ids of pieces already run through BPE. Text is Zipfian, so after a few pages almost every
// piece is a hit (the reference implementations keep such a cache too). Ids live in one arena
// instead of a vector per entry. Not thread-safe: one per workspace (workspace_pool.hpp).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kintsugi::data {

class PieceCache {
 public:
  // Bounds that keep a cache to a few hundred MB on adversarial input; ordinary corpora never
  // reach them. Long pieces (runs of spaces, base64) are rarely repeated: not cached.
  static constexpr std::size_t kMaxPieceBytes = 64, kMaxEntries = 1 << 19;

  // Appends the cached ids of `piece` to `out`; false if it is not cached.
  bool get(std::string_view piece, std::vector<std::int32_t>& out) const {
    auto hit = map_.find(piece);
    if (hit == map_.end()) return false;
    auto begin = ids_.begin() + hit->second.begin;
    out.insert(out.end(), begin, begin + hit->second.size);
    return true;
  }

  // Remembers that `piece` encodes to `ids`.
  void put(std::string_view piece, std::span<const std::int32_t> ids) {
    if (piece.size() > kMaxPieceBytes) return;
    if (map_.size() >= kMaxEntries) {
      map_.clear();
      ids_.clear();
    }
    Span span{static_cast<std::uint32_t>(ids_.size()), static_cast<std::uint32_t>(ids.size())};
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    map_.emplace(std::string(piece), span);
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Span {
    std::uint32_t begin, size;
  };
  std::unordered_map<std::string, Span, Hash, std::equal_to<>> map_;
  std::vector<std::int32_t> ids_;
};

}  // namespace kintsugi::data
