#include "kintsugi/data/hf_decoder.hpp"

#include <nlohmann/json.hpp>

#include <array>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/utf8.hpp"

namespace kintsugi::data {
namespace {

// GPT-2's byte symbols back to bytes; other characters stay as they are.
std::string symbols_to_bytes(std::string_view token) {
  static const auto inverse = [] {
    std::array<int, 0x144> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const std::string symbol = byte_symbol(static_cast<std::uint8_t>(b));
      std::size_t i = 0;
      table[next_code_point(symbol, i)] = b;
    }
    return table;
  }();
  std::string out;
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t start = i;
    const char32_t c = next_code_point(token, i);
    if (c < inverse.size() && inverse[c] >= 0)
      out += static_cast<char>(inverse[c]);
    else
      out.append(token.substr(start, i - start));
  }
  return out;
}

// "<0x41>" -> 0x41; -1 for anything else.
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

HfDecoder::HfDecoder(const nlohmann::json& config, std::string_view what) {
  if (config.is_null())
    none_ = true;
  else
    add(config, what);
}

void HfDecoder::add(const nlohmann::json& config, std::string_view what) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : config.at("decoders")) add(step, what);
  } else if (type == "ByteLevel") {
    steps_.push_back({.kind = Kind::byte_level});
  } else if (type == "Replace") {
    const auto& pattern = config.at("pattern");
    if (!pattern.contains("String"))
      fail("{}: a Replace decoder with a regex pattern is not supported", what);
    steps_.push_back({.kind = Kind::replace, .pattern = pattern["String"].get<std::string>(),
                      .content = config.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    steps_.push_back({.kind = Kind::byte_fallback});
  } else if (type == "Fuse") {
    steps_.push_back({.kind = Kind::fuse});
  } else if (type == "Strip") {
    steps_.push_back({.kind = Kind::strip, .content = config.at("content").get<std::string>(),
                      .start = config.value("start", 0), .stop = config.value("stop", 0)});
  } else if (type == "Metaspace") {
    const std::string scheme = config.contains("prepend_scheme")
                                   ? config["prepend_scheme"].get<std::string>()
                                   : (config.value("add_prefix_space", true) ? "always" : "never");
    steps_.push_back({.kind = Kind::metaspace,
                      .content = config.value("replacement", "\u2581"),
                      .prefix = scheme != "never"});
  } else {
    fail("{}: decoder type \"{}\" is not supported (kintsugi reads Sequence, ByteLevel, Replace, "
         "ByteFallback, Fuse, Strip and Metaspace)", what, type);
  }
}

std::string HfDecoder::decode(std::vector<std::string> tokens,
                              const std::vector<bool>& added) const {
  if (none_) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  std::vector<bool> is_added = added;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::byte_level:
        for (std::size_t i = 0; i < tokens.size(); ++i)
          if (!is_added[i]) tokens[i] = symbols_to_bytes(tokens[i]);
        break;
      case Kind::replace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case Kind::byte_fallback: {
        // Runs of <0xXX> tokens become the bytes they name.
        std::vector<std::string> out;
        std::vector<bool> out_added;
        bool in_bytes = false;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const int b = fallback_byte(tokens[i]);
          if (b >= 0) {
            if (!in_bytes) out.emplace_back(), out_added.push_back(false);
            out.back() += static_cast<char>(b);
          } else {
            out.push_back(std::move(tokens[i]));
            out_added.push_back(is_added[i]);
          }
          in_bytes = b >= 0;
        }
        tokens = std::move(out);
        is_added = std::move(out_added);
        break;
      }
      case Kind::fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        is_added.assign(1, false);
        break;
      }
      case Kind::strip:
        for (auto& t : tokens) {
          std::string_view v = t;
          for (int k = 0; k < step.start && v.starts_with(step.content); ++k)
            v.remove_prefix(step.content.size());
          for (int k = 0; k < step.stop && v.ends_with(step.content); ++k)
            v.remove_suffix(step.content.size());
          t = std::string(v);
        }
        break;
      case Kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.content, " ");
          if (step.prefix && i == 0 && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace kintsugi::data
