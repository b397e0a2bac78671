#include "kintsugi/cli/layout_flags.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kintsugi/cli/text_option.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/layout_pins.hpp"
#include "kintsugi/core/parallel_layout_json.hpp"
#include "kintsugi/plan/value_list.hpp"
#include "kintsugi/train/run_config.hpp"

namespace kintsugi::cli {

namespace {

constexpr std::string_view kSection = "parallel.";

// The table's parallel.* keys, in its order.
const std::vector<ConfigKeyDoc>& layout_keys() {
  static const std::vector<ConfigKeyDoc> keys = [] {
    std::vector<ConfigKeyDoc> out;
    for (ConfigKeyDoc& k : run_config_keys())
      if (k.key.starts_with(kSection)) out.push_back(std::move(k));
    return out;
  }();
  return keys;
}

const ConfigKeyDoc& key_doc(const std::string& key) {
  for (const ConfigKeyDoc& k : layout_keys())
    if (k.key == key) return k;
  throw Error(fmt::format("no layout key {} in the config key table", key));
}

std::vector<std::string> offered(const std::vector<std::string>& keys) {
  if (!keys.empty()) return keys;
  std::vector<std::string> all;
  for (const ConfigKeyDoc& k : layout_keys()) all.push_back(k.key);
  return all;
}

std::string capitalized(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (std::size_t comma; (comma = text.find(',', begin)) != std::string::npos; begin = comma + 1)
    parts.push_back(text.substr(begin, comma - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

bool whole_number(const std::string& text) {
  const std::size_t digits = text.starts_with('-') ? 1 : 0;
  return text.size() > digits && text.size() < 12 &&
         std::all_of(text.begin() + static_cast<std::ptrdiff_t>(digits), text.end(),
                     [](unsigned char c) { return std::isdigit(c); });
}

// The TOML value of one flag's text for its key's type; refused naming the flag.
std::string toml_value(const ConfigKeyDoc& key, const std::string& text) {
  const std::string flag = flag_of(key.key);
  if (key.type == "boolean") {
    if (text != "true" && text != "false")
      fail("{}={} must be true or false (the flag alone is true)", flag, text);
    return text;
  }
  if (key.type == "integer") {
    if (!whole_number(text)) fail("{} {} must be a whole number", flag, text);
    return text;
  }
  if (key.type == "float") {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v))
      fail("{} {} must be a finite number", flag, text);
    return text;
  }
  if (key.type == "integers") {
    const std::vector<std::string> parts = split(text);
    const bool numbers = std::all_of(parts.begin(), parts.end(), whole_number);
    if (!numbers) fail("{} {} must be whole numbers separated by commas (e.g. 5,4,3)", flag, text);
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  // How many numbers a list needs (a grid's three) is the config's check, as for --set.
  // Strings (and the names of choices): the config checks the name; quotes cannot be in one.
  if (std::any_of(text.begin(), text.end(),
                  [](unsigned char c) { return c == '"' || c == '\\' || std::iscntrl(c); }))
    fail("{} {} is not a valid value", flag, text);
  return fmt::format("\"{}\"", text);
}

// What --help shows as the value: the key's type as the config table names it.
std::string type_of(const ConfigKeyDoc& key) {
  if (key.type == "integers") return "N,N,...";
  std::string name = key.type == "string" ? "NAME" : key.type;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) {
    return static_cast<char>(std::toupper(c));
  });
  return name;
}

}  // namespace

std::string flag_of(std::string_view key) {
  if (key.starts_with(kSection)) key.remove_prefix(kSection.size());
  std::string flag = "--" + std::string(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

void add_layout_flags(CLI::App& command, LayoutFlagValues& values,
                      const std::vector<std::string>& keys) {
  for (const std::string& key : offered(keys)) {
    const ConfigKeyDoc& doc = key_doc(key);
    const std::string how = doc.type == "boolean"    ? "; =false turns it off"
                            : doc.type == "integers" ? "; the flag takes them comma-separated"
                                                     : "";
    const std::string help = fmt::format("{} ({}{})", capitalized(doc.doc), key, how);
    std::string& target = values[key];
    if (doc.type == "boolean")
      command.add_flag(flag_of(key), target, help);
    else
      add_text_option(command, flag_of(key), target, help)->type_name(type_of(doc));
  }
}

std::vector<std::string> layout_overrides(const LayoutFlagValues& values) {
  std::vector<std::string> overrides;
  for (const auto& [key, text] : values)
    if (!text.empty()) overrides.push_back(key + "=" + toml_value(key_doc(key), text));
  return overrides;
}

void add_layout_pins(CLI::App& command, LayoutFlagValues& pins,
                     const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    const ConfigKeyDoc& doc = key_doc(key);
    const std::string what =
        doc.type == "boolean"    ? "true, false or true,false"
        : doc.type == "string"   ? "one value or a list: a,b"
        : doc.type == "integers" ? "none (the empty list), any (every list but none) or lists "
                                   "N,N,..., one or several: none 2,2,1"
                                 : "one value, a list: 2,4, or a range: 1:8";
    const std::string help = fmt::format("Pin {} ({}): {}", key, doc.doc, what);
    std::string& target = pins[key];
    if (doc.type == "boolean") {
      command.add_flag(flag_of(key), target, help);
    } else if (doc.type == "integers") {
      // Each list is one word (its numbers comma-separated), so the lists are words.
      command
          .add_option_function<std::vector<std::string>>(
              flag_of(key),
              [&target](const std::vector<std::string>& words) {
                target = fmt::format("{}", fmt::join(words, " "));
              },
              help)
          ->expected(1, -1)
          ->type_name(type_of(doc));
    } else {
      add_text_option(command, flag_of(key), target, help)->type_name(type_of(doc) + "[,...]");
    }
  }
}

namespace {

// One value of a pin in the record's form (field_text), checked against the record's ranges.
// `given` is the value as the user wrote it, for messages.
std::string pin_value(const std::string& key, const std::string& value, const std::string& given) {
  const std::string field = key.substr(kSection.size()), flag = flag_of(key);
  ParallelLayout probe;
  try {
    set_field(probe, field, value);
  } catch (const Error& e) {
    fail("{} {}: {}", flag, given, e.what());
  }
  if (const std::string problem = probe.value_problem(); !problem.empty())
    fail("{} {}: {}", flag, given, problem);
  return field_text(probe, field);
}

// A list pin's words: none, any, or whole numbers separated by commas.
std::string list_value(const std::string& key, const std::string& word) {
  if (word == "none") return "[]";
  if (word == LayoutPins::kAny) return word;
  const std::vector<std::string> parts = split(word);
  if (!std::all_of(parts.begin(), parts.end(), whole_number))
    fail("{} '{}' must be none, any or whole numbers separated by commas (e.g. 2,2,1)",
         flag_of(key), word);
  return pin_value(key, fmt::format("[{}]", word), word);
}

}  // namespace

std::vector<std::string> pin_values(const LayoutFlagValues& pins, const std::string& key) {
  const auto it = pins.find(key);
  if (it == pins.end() || it->second.empty()) return {};
  const std::string& text = it->second;
  const std::string type = key_doc(key).type;
  std::vector<std::string> values;
  if (type == "integer") {
    for (std::int64_t n : parse_values(text, flag_of(key), 0))
      values.push_back(pin_value(key, std::to_string(n), std::to_string(n)));
  } else if (type == "integers") {
    std::istringstream words(text);
    for (std::string word; words >> word;) values.push_back(list_value(key, word));
  } else {
    for (const std::string& v : split(text)) {
      if (type == "boolean" && v != "true" && v != "false")
        fail("{}={} must be true, false or true,false", flag_of(key), text);
      values.push_back(pin_value(key, v, v));
    }
  }
  return values;
}

LayoutPins layout_pins(const LayoutFlagValues& pins) {
  LayoutPins out;
  for (const auto& [key, text] : pins)
    if (!text.empty()) out.pin(key.substr(kSection.size()), pin_values(pins, key));
  return out;
}

std::vector<std::string> pinnable_keys() {
  std::vector<std::string> keys;
  for (const std::string& field : layout_fields(true)) keys.push_back(std::string(kSection) + field);
  return keys;
}

}  // namespace kintsugi::cli
