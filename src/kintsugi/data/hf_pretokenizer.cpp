#include "kintsugi/data/hf_pretokenizer.hpp"

#include <nlohmann/json.hpp>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/pretokenizer.hpp"
#include "kintsugi/data/regex.hpp"

namespace kintsugi::data {
namespace {

std::shared_ptr<Regex> pattern_of(const nlohmann::json& pattern, std::string_view what) {
  const std::string pcre2 = pattern.contains("String")
                                ? quote_literal(pattern["String"].get<std::string>())
                                : translate_pattern(pattern.at("Regex").get<std::string>(), what);
  return std::make_shared<Regex>(pcre2, what);
}

}  // namespace

HfPreTokenizer::HfPreTokenizer(const nlohmann::json& config, std::string_view what) {
  if (!config.is_null()) add(config, what);
}
HfPreTokenizer::HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer::~HfPreTokenizer() = default;

void HfPreTokenizer::add(const nlohmann::json& config, std::string_view what) {
  const std::string type = config.value("type", "");
  if (byte_level_)
    fail("{}: a {} pre-tokenizer after ByteLevel is not supported", what, type);
  if (type == "Sequence") {
    for (const auto& step : config.at("pretokenizers")) add(step, what);
  } else if (type == "Split") {
    const std::string behavior = config.value("behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Removed")
      fail("{}: Split behavior \"{}\" is not supported (kintsugi reads Isolated and Removed)",
           what, behavior);
    steps_.push_back({.kind = Kind::split, .regex = pattern_of(config.at("pattern"), what),
                      .removed = behavior == "Removed", .invert = config.value("invert", false)});
  } else if (type == "ByteLevel") {
    Step step{.kind = Kind::byte_level, .add_prefix_space = config.value("add_prefix_space", false)};
    if (config.value("use_regex", true))
      step.regex = std::make_shared<Regex>(translate_pattern(kGpt2Pattern, what), what);
    steps_.push_back(std::move(step));
    byte_level_ = true;
  } else if (type == "Metaspace") {
    Step step{.kind = Kind::metaspace, .replacement = config.value("replacement", "\u2581"),
              .split_pieces = config.value("split", true)};
    // Files before tokenizers 0.19 say add_prefix_space instead of prepend_scheme.
    const std::string scheme =
        config.contains("prepend_scheme")
            ? config["prepend_scheme"].get<std::string>()
            : (config.value("add_prefix_space", true) ? "always" : "never");
    if (scheme != "always" && scheme != "first" && scheme != "never")
      fail("{}: Metaspace prepend_scheme \"{}\" is not always, first or never", what, scheme);
    step.prepend = scheme == "always" ? Prepend::always : scheme == "first" ? Prepend::first
                                                                            : Prepend::never;
    steps_.push_back(std::move(step));
  } else {
    fail("{}: pre-tokenizer type \"{}\" is not supported (kintsugi reads Sequence, Split, "
         "ByteLevel and Metaspace)", what, type);
  }
}

void HfPreTokenizer::apply(const Step& step, std::string_view piece, int section,
                           std::deque<std::string>& arena,
                           std::vector<std::string_view>& out) const {
  if (step.kind == Kind::metaspace) {
    std::string& s = arena.emplace_back();
    for (char c : piece) c == ' ' ? s += step.replacement : s += c;
    if ((step.prepend == Prepend::always || (step.prepend == Prepend::first && section == 0)) &&
        !std::string_view(s).starts_with(step.replacement))
      s.insert(0, step.replacement);
    if (!step.split_pieces) return out.push_back(s);
    // Each replacement character starts a new piece (MergedWithNext).
    std::string_view text = s;
    std::size_t begin = 0;
    for (std::size_t at = text.find(step.replacement, 1); at != std::string_view::npos;
         at = text.find(step.replacement, at + 1)) {
      out.push_back(text.substr(begin, at - begin));
      begin = at;
    }
    return out.push_back(text.substr(begin));
  }
  if (step.kind == Kind::byte_level && step.add_prefix_space && !piece.starts_with(' '))
    piece = arena.emplace_back(" " + std::string(piece));
  if (!step.regex) return out.push_back(piece);
  // Matches and the text between them (Isolated), or only the text between (Removed), or
  // only the matches (invert).
  auto matches = step.regex->matches(piece);
  std::size_t previous = 0, begin = 0, end = 0;
  const bool keep_gaps = !step.invert, keep_matches = step.invert || !step.removed;
  while (matches.next(begin, end)) {
    if (keep_gaps && begin > previous) out.push_back(piece.substr(previous, begin - previous));
    if (keep_matches) out.push_back(piece.substr(begin, end - begin));
    previous = end;
  }
  if (keep_gaps && previous < piece.size()) out.push_back(piece.substr(previous));
}

void HfPreTokenizer::split(std::string_view text, int section, std::deque<std::string>& arena,
                           std::vector<std::string_view>& pieces) const {
  pieces.assign(1, text);
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) apply(step, piece, section, arena, next);
    pieces.swap(next);
  }
}

}  // namespace kintsugi::data
