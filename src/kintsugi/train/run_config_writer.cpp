// A run config written back as TOML (run_config_toml): every key of the table, the preset
// where the model is one, data.train's blend as one list, floats as the shortest decimal that
// reads back to the same double.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <string_view>
#include <toml++/toml.h>

#include "kintsugi/train/run_config.hpp"
#include "kintsugi/train/run_config_keys.hpp"

namespace kintsugi {

using config_keys::Key;
using config_keys::keys_of;

namespace {

// toml++ (as Debian builds it) writes a float with 17 significant digits, so 0.55 reads back as
// 0.55000000000000004 in a written config. Each float of the text is rewritten as the shortest
// decimal that reads back to the same double (std::to_chars), so a written file shows the
// numbers a user typed. Strings and comments are left alone; integers are not floats.
std::string with_shortest_floats(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  const auto starts_value = [&](std::size_t at) {
    if (at == 0) return false;
    std::size_t j = at;
    while (j > 0 && text[j - 1] == ' ') --j;
    return j > 0 && (text[j - 1] == '=' || text[j - 1] == '[' || text[j - 1] == ',');
  };
  while (i < text.size()) {
    const char ch = text[i];
    if (ch == '"' || ch == '\'') {  // a string, copied whole (basic strings have escapes)
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != ch) j += (ch == '"' && text[j] == '\\') ? 2 : 1;
      j = std::min(j + 1, text.size());
      out.append(text, i, j - i);
      i = j;
      continue;
    }
    if (ch == '#') {  // a comment, to the end of its line
      const std::size_t j = std::min(text.find('\n', i), text.size());
      out.append(text, i, j - i);
      i = j;
      continue;
    }
    if ((std::isdigit(static_cast<unsigned char>(ch)) || ch == '-' || ch == '+') &&
        starts_value(i)) {
      std::size_t j = i;
      while (j < text.size() && std::string_view("0123456789.eE+-").find(text[j]) != std::string_view::npos)
        ++j;
      const std::string_view token(text.data() + i, j - i);
      double v = 0;
      const char* first = token.data() + (token.front() == '+' ? 1 : 0);
      const auto parsed = std::from_chars(first, token.data() + token.size(), v);
      if (token.find_first_of(".eE") != std::string_view::npos && parsed.ec == std::errc() &&
          parsed.ptr == token.data() + token.size()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof(buf), v);
        std::string shortest(buf, r.ptr);
        if (shortest.find_first_of(".e") == std::string::npos) shortest += ".0";
        out += shortest;
      } else {
        out.append(token);
      }
      i = j;
      continue;
    }
    out += ch;
    ++i;
  }
  return out;
}

}  // namespace

std::string run_config_toml(const RunConfig& config) {
  RunConfig c = config;
  // The deprecated key is written as the number of windows it meant.
  c.train.eval_sequences = eval_sequences_of(c.train);
  c.train.eval_batches = 0;
  toml::table root;
  const auto presets = model_preset_names();
  if (std::find(presets.begin(), presets.end(), c.model.name) != presets.end())
    root.insert_or_assign("model", toml::table{{"preset", c.model.name}});
  for (const Key& key : keys_of(c)) {
    const auto dot = key.path.find('.');
    const std::string section = key.path.substr(0, dot);
    if (!root.contains(section)) root.insert(section, toml::table{});
    config_keys::insert_value(*root[section].as_table(), key.path.substr(dot + 1), key.target);
  }
  if (!c.data.blend.empty()) {
    toml::array blend;
    for (const DataSource& d : c.data.blend) {
      toml::table entry{{"path", d.path}, {"weight", d.weight}};
      if (!d.val.empty()) entry.insert("val", d.val);
      blend.push_back(std::move(entry));
    }
    root["data"].as_table()->insert_or_assign("train", std::move(blend));
  }
  std::ostringstream out;
  out << toml::toml_formatter(root);
  return with_shortest_floats(out.str()) + "\n";
}

}  // namespace kintsugi
