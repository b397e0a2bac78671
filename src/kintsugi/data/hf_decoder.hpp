#pragma once
// The "decoder" of a Hugging Face tokenizer.json: turns token strings back into text.
// Supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace. Unlike the
// reference, bytes that do not form valid UTF-8 (a prefix of a character's tokens) are kept as
// they are rather than replaced by U+FFFD, so decoding is exact and can be streamed.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kintsugi::data {

class HfDecoder {
 public:
  // `config` is the file's "decoder" (null: token strings joined by spaces, as the reference).
  HfDecoder(const nlohmann::json& config, std::string_view what);

  // `tokens` are token strings; `added[i]` says whether tokens[i] is an added token (written
  // out as is by ByteLevel).
  std::string decode(std::vector<std::string> tokens, const std::vector<bool>& added) const;

 private:
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
  struct Step {
    Kind kind;
    std::string pattern, content;  // replace; strip: content; metaspace: the replacement
    int start = 0, stop = 0;       // strip
    bool prefix = true;            // metaspace: strip the space it prepended
  };
  void add(const nlohmann::json& config, std::string_view what);
  std::vector<Step> steps_;
  bool none_ = false;
};

}  // namespace kintsugi::data
