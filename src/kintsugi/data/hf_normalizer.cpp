#include "kintsugi/data/hf_normalizer.hpp"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <cstdlib>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/regex.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::data {
namespace {

std::string unicode_normalize(std::string_view text, utf8proc_option_t form) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | form));
  if (n < 0) fail("Unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

std::string replace_all(std::string_view text, const Regex& regex, std::string_view content) {
  std::string out;
  std::size_t begin = 0, match_begin = 0, match_end = 0;
  auto matches = regex.matches(text);
  while (matches.next(match_begin, match_end)) {
    out.append(text.substr(begin, match_begin - begin)).append(content);
    begin = match_end;
  }
  return out.append(text.substr(begin));
}

}  // namespace

HfNormalizer::HfNormalizer(const nlohmann::json& config, std::string_view what) {
  if (!config.is_null()) add(config, what);
}
HfNormalizer::HfNormalizer(HfNormalizer&&) noexcept = default;
HfNormalizer::~HfNormalizer() = default;

void HfNormalizer::add(const nlohmann::json& config, std::string_view what) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : config.at("normalizers")) add(step, what);
  } else if (type == "Prepend") {
    steps_.push_back({.kind = Kind::prepend, .text = config.at("prepend").get<std::string>()});
  } else if (type == "Replace") {
    Step step{.kind = Kind::replace, .content = config.at("content").get<std::string>()};
    const auto& pattern = config.at("pattern");
    if (pattern.contains("String"))
      step.text = pattern["String"].get<std::string>();
    else
      step.regex = std::make_shared<Regex>(
          translate_pattern(pattern.at("Regex").get<std::string>(), what), what);
    steps_.push_back(std::move(step));
  } else if (type == "Strip") {
    steps_.push_back({.kind = Kind::strip, .left = config.value("strip_left", false),
                      .right = config.value("strip_right", false)});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const Kind kind = type == "NFC" ? Kind::nfc : type == "NFD" ? Kind::nfd
                      : type == "NFKC" ? Kind::nfkc : Kind::nfkd;
    steps_.push_back({.kind = kind});
  } else {
    fail("{}: normalizer type \"{}\" is not supported (kintsugi reads Sequence, Prepend, "
         "Replace, Strip, NFC, NFD, NFKC and NFKD)", what, type);
  }
}

std::string_view HfNormalizer::apply(std::string_view text, std::string& buffer) const {
  if (steps_.empty()) return text;
  std::string current(text);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::prepend: current = s.text + current; break;
      case Kind::replace:
        current = s.regex ? replace_all(current, *s.regex, s.content)
                          : replace_all(current, s.text, s.content);
        break;
      case Kind::strip: current = std::string(trim_white_space(current, s.left, s.right)); break;
      case Kind::nfc: current = unicode_normalize(current, UTF8PROC_COMPOSE); break;
      case Kind::nfd: current = unicode_normalize(current, UTF8PROC_DECOMPOSE); break;
      case Kind::nfkc:
        current = unicode_normalize(current, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
        break;
      case Kind::nfkd:
        current = unicode_normalize(current, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
        break;
    }
  }
  buffer = std::move(current);
  return buffer;
}

}  // namespace kintsugi::data
