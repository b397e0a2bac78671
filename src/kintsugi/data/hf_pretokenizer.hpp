#pragma once
// The "pre_tokenizer" of a Hugging Face tokenizer.json: cuts normalized text into the pieces
// BPE runs in. Supported: Sequence, Split (regex or string; Isolated or Removed; invert),
// ByteLevel (the last step: add_prefix_space, GPT-2's regex when use_regex) and Metaspace
// (replacement, prepend_scheme always/first/never, split).
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kintsugi::data {

class Regex;

class HfPreTokenizer {
 public:
  // `config` is the file's "pre_tokenizer" (null: the whole text is one piece).
  HfPreTokenizer(const nlohmann::json& config, std::string_view what);
  HfPreTokenizer(HfPreTokenizer&&) noexcept;
  ~HfPreTokenizer();

  // Whether the file's pre-tokenization ends in ByteLevel: BPE then runs on bytes.
  bool byte_level() const { return byte_level_; }

  // Sets `pieces` to the pieces of `text`, the `section`-th stretch of the input between added
  // tokens (Metaspace's "first" scheme prepends only to section 0). Pieces point into `text` or
  // into strings kept in `arena` (cleared by the caller between texts).
  void split(std::string_view text, int section, std::deque<std::string>& arena,
             std::vector<std::string_view>& pieces) const;

 private:
  enum class Kind { split, byte_level, metaspace };
  enum class Prepend { always, first, never };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> regex;  // split; byte_level with use_regex
    bool removed = false, invert = false;  // split
    bool add_prefix_space = false;         // byte_level
    std::string replacement;               // metaspace
    Prepend prepend = Prepend::always;     // metaspace
    bool split_pieces = true;              // metaspace
  };
  void add(const nlohmann::json& config, std::string_view what);
  void apply(const Step& step, std::string_view piece, int section, std::deque<std::string>& arena,
             std::vector<std::string_view>& out) const;
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace kintsugi::data
