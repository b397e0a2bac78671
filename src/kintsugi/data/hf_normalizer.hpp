#pragma once
// The "normalizer" of a Hugging Face tokenizer.json: steps applied to each stretch of text
// between added tokens before pre-tokenization. Supported: Sequence, Prepend, Replace (string
// or regex pattern), Strip, NFC, NFD, NFKC, NFKD (Unicode normalization by utf8proc).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kintsugi::data {

class Regex;

class HfNormalizer {
 public:
  // `config` is the file's "normalizer" (null: none). kintsugi::Error naming `what` and the
  // type for a step kintsugi does not implement.
  HfNormalizer(const nlohmann::json& config, std::string_view what);
  HfNormalizer(HfNormalizer&&) noexcept;
  ~HfNormalizer();

  bool empty() const { return steps_.empty(); }
  // The normalized text: `text` itself when there are no steps, else held in `buffer`.
  std::string_view apply(std::string_view text, std::string& buffer) const;

 private:
  enum class Kind { prepend, replace, strip, nfc, nfd, nfkc, nfkd };
  struct Step {
    Kind kind;
    std::string text, content;     // prepend: text; replace: literal pattern and content
    std::shared_ptr<Regex> regex;  // replace with a regex pattern
    bool left = false, right = false;  // strip
  };
  void add(const nlohmann::json& config, std::string_view what);
  std::vector<Step> steps_;
};

}  // namespace kintsugi::data
