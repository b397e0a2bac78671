// Reading a run config: the TOML file, --set overrides and data.train's blend, every key
// through the one key table (run_config_keys.hpp); what a config means (its learning-rate
// schedule, validation windows, notes) and how two configs differ. Its checks are in
// run_config_checks.cpp, writing it back in run_config_writer.cpp.
#include "kintsugi/train/run_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <regex>
#include <set>
#include <toml++/toml.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/plan/flops.hpp"
#include "kintsugi/train/run_config_keys.hpp"

namespace kintsugi {

using config_keys::Key;
using config_keys::keys_of;

namespace {

// A --set value that is written as a number but that TOML cannot hold: an integer beyond 64
// bits or a float beyond a double's range. Refused here with the range, since taken as a string
// it would be answered "must be integer" (or "float"), which it is.
void refuse_out_of_range_number(const std::string& text, const std::string& value) {
  static const std::regex integer("[+-]?[0-9][0-9_]*");
  static const std::regex floating("[+-]?[0-9][0-9_]*(\\.[0-9_]+)?([eE][+-]?[0-9_]+)?");
  std::string digits = value;
  std::erase(digits, '_');
  if (std::regex_match(value, integer)) {
    std::int64_t parsed = 0;
    const char* begin = digits.c_str() + (digits[0] == '+');
    if (std::from_chars(begin, digits.c_str() + digits.size(), parsed).ec ==
        std::errc::result_out_of_range)
      fail("--set {}: {} is out of range: integers run from {} to {}", text, value,
           std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    return;
  }
  if (!std::regex_match(value, floating)) return;
  errno = 0;
  const double parsed = std::strtod(digits.c_str(), nullptr);
  if (std::isinf(parsed))
    fail("--set {}: {} is out of range: not a finite number (a float's magnitude is at most {:g})",
         text, value, std::numeric_limits<double>::max());
  if (errno == ERANGE && parsed == 0)
    fail("--set {}: {} is out of range: too small for a float (the smallest magnitude is {:g}); "
         "write 0 for zero",
         text, value, std::numeric_limits<double>::denorm_min());
}

// "train.lr=3e-4" -> table["train"]["lr"] = 3e-4. Values are parsed as TOML; what does not
// parse (a bare path) is taken as a string.
void apply_override(toml::table& root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set {}: expected section.key=value, for example --set train.lr=3e-4", text);
  const std::string path = text.substr(0, eq), value = text.substr(eq + 1);
  const auto dot = path.find('.');
  if (dot == std::string::npos)
    fail("--set {}: the key must name its section, for example train.steps", text);
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    refuse_out_of_range_number(text, value);
    parsed.insert_or_assign("v", value);
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  auto* table = root[section].as_table();
  if (!table) fail("--set {}: `{}` is not a section", text, section);
  table->insert_or_assign(key, *parsed["v"].node());
}

// data.train as a list of { path, weight, val } tables: moved into config.data.blend and out of
// `root`, where the string key would refuse it.
void take_blend(toml::table& root, DataConfig& data, const std::string& source) {
  auto* table = root["data"].as_table();
  const auto* list = table ? (*table)["train"].as_array() : nullptr;
  if (!list) return;
  if (list->empty()) fail("{}: data.train is an empty list: name at least one dataset", source);
  for (const auto& item : *list) {
    const auto* entry = item.as_table();
    if (!entry || !(*entry)["path"].is_string())
      fail("{}: each data.train entry must be a table with a path, like "
           "{{ path = \"a.bin\", weight = 0.5 }}",
           source);
    DataSource d{.path = *(*entry)["path"].value<std::string>()};
    for (const auto& [key, value] : *entry) {
      if (key == "weight" && value.is_number())
        d.weight = *value.value<double>();
      else if (key == "val" && value.is_string())
        d.val = *value.value<std::string>();
      else if (key != "path")
        fail("{}: data.train entry {}: `{}` is not path, weight (a number) or val (a string)",
             source, d.path, key.str());
    }
    if (!(d.weight > 0))
      fail("{}: data.train entry {}: weight {} must be positive", source, d.path, d.weight);
    data.blend.push_back(std::move(d));
  }
  data.train = data.blend.front().path;
  table->erase("train");
}

// Whether two models have the same weights' shapes and architecture (context length, norm
// epsilon, init and RoPE base aside).
bool same_shape(const ModelConfig& a, const ModelConfig& b) {
  return a.family == b.family && a.n_layer == b.n_layer && a.d_model == b.d_model &&
         a.n_head == b.n_head && a.kv_heads() == b.kv_heads() && a.d_ff == b.d_ff &&
         a.vocab_size == b.vocab_size;
}

// A model that is not its preset's shape is named by family and size, e.g. "gpt2-3.4M", so
// that logs and checkpoints do not call it by the preset it started from.
std::string custom_model_name(const ModelConfig& m) {
  const double n = parameter_count_double(m);
  return n >= 1e9 ? fmt::format("{}-{:.1f}B", name_of(m.family), n / 1e9)
                  : fmt::format("{}-{:.1f}M", name_of(m.family), n / 1e6);
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root;
  if (!path.empty()) {
    if (!std::filesystem::exists(path)) fail("config file {} does not exist", path);
    if (std::filesystem::is_directory(path))
      fail("config file {} is a directory: name a .toml file (configs/ has examples)", path);
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      fail("{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column,
           e.description());
    }
  }
  // A --set of either validation-size key replaces the other one from the file (an old script's
  // train.eval_batches over a config of eval_sequences); both from one source conflict (below).
  for (const auto& o : overrides)
    for (const auto& [given, replaced] : {std::pair{"train.eval_batches=", "eval_sequences"},
                                         std::pair{"train.eval_sequences=", "eval_batches"}})
      if (o.rfind(given, 0) == 0)
        if (auto* train = root["train"].as_table()) train->erase(replaced);
  for (const auto& o : overrides) apply_override(root, o);

  RunConfig config;
  config.source = path.empty() ? "defaults" : path;
  const std::string& src = config.source;
  take_blend(root, config.data, src);
  std::set<std::string> known = {"model.preset"};
  if (auto preset = root["model"]["preset"]) {
    if (!preset.is_string()) fail("{}: `model.preset` must be a string", src);
    config.model = model_preset(*preset.value<std::string>());
  }
  const ModelConfig preset_model = config.model;
  for (const Key& key : keys_of(config)) {
    known.insert(key.path);
    const auto dot = key.path.find('.');
    if (auto node = root[key.path.substr(0, dot)][key.path.substr(dot + 1)])
      config_keys::assign(key, *node.node(), src);
  }
  for (const auto& [section, value] : root) {
    const auto* table = value.as_table();
    if (!table) fail("{}: `{}` must be a [section]", src, section.str());
    for (const auto& [key, _] : *table) {
      const std::string full = fmt::format("{}.{}", section.str(), key.str());
      if (!known.count(full))
        fail("{}: unknown key `{}` (see docs/config.md or `kintsugi train --help-config`)", src,
             full);
    }
  }
  if (root["train"]["eval_sequences"] && config.train.eval_batches > 0)
    fail("{}: train.eval_sequences and the deprecated train.eval_batches are both set: keep "
         "train.eval_sequences only",
         src);
  validate(config);  // first: naming the model counts its parameters, which divides by n_head
  if (!same_shape(config.model, preset_model)) config.model.name = custom_model_name(config.model);
  return config;
}

LrSchedule lr_schedule_of(const TrainConfig& t) {
  const std::int64_t decay = t.decay_steps > 0 ? t.decay_steps : t.steps;
  return {.max_lr = t.lr, .min_lr = t.min_lr, .warmup_steps = std::min(t.warmup_steps, decay),
          .decay_steps = decay, .shape = t.lr_schedule, .decay_fraction = t.lr_decay_fraction};
}

std::int64_t eval_sequences_of(const TrainConfig& t) {
  return t.eval_batches > 0 ? t.eval_batches * t.micro_batch : t.eval_sequences;
}

std::vector<std::string> config_notes(const RunConfig& c) {
  std::vector<std::string> notes;
  const LrSchedule s = lr_schedule_of(c.train);
  if (s.warmup_steps < c.train.warmup_steps)
    notes.push_back(fmt::format("note: train.warmup_steps = {} is longer than the run "
                                "(train.steps = {}): warming up over {} steps instead",
                                c.train.warmup_steps, c.train.steps, s.warmup_steps));
  if (c.train.eval_batches > 0)
    notes.push_back(fmt::format("note: train.eval_batches is deprecated: it validates on "
                                "eval_batches {} x micro_batch {} = {} windows, a set that changes "
                                "with the micro-batch; set train.eval_sequences = {} instead",
                                c.train.eval_batches, c.train.micro_batch,
                                eval_sequences_of(c.train), eval_sequences_of(c.train)));
  return notes;
}

namespace {

// A blend as the config file writes it (one list), or "" for a single data.train.
std::string blend_text(const DataConfig& data) {
  std::string text;
  for (const DataSource& d : data.blend)
    text += fmt::format("{}{{ path = \"{}\", weight = {}{} }}", text.empty() ? "[" : ", ", d.path,
                        d.weight, d.val.empty() ? "" : fmt::format(", val = \"{}\"", d.val));
  return text.empty() ? text : text + "]";
}

}  // namespace

std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after) {
  RunConfig a = before, b = after;
  // The deprecated key compared as the windows it means, as the file writes it.
  for (RunConfig* c : {&a, &b}) {
    c->train.eval_sequences = eval_sequences_of(c->train);
    c->train.eval_batches = 0;
  }
  const std::vector<Key> ka = keys_of(a), kb = keys_of(b);
  std::vector<ConfigChange> changes;
  for (std::size_t i = 0; i < ka.size(); ++i) {
    std::string was = config_keys::value_text(ka[i].target),
                now = config_keys::value_text(kb[i].target);
    if (ka[i].path == "data.train" && !(a.data.blend.empty() && b.data.blend.empty())) {
      if (!a.data.blend.empty()) was = blend_text(a.data);
      if (!b.data.blend.empty()) now = blend_text(b.data);
    }
    if (was != now) changes.push_back({ka[i].path, std::move(was), std::move(now)});
  }
  return changes;
}

std::vector<ConfigKeyDoc> run_config_keys() {
  RunConfig defaults;
  std::vector<ConfigKeyDoc> docs = {
      {"model.preset", "string", "\"gpt-tiny\"",
       fmt::format("start from a preset ({}); other model.* keys override it",
                   fmt::join(model_preset_names(), ", "))}};
  for (const Key& k : keys_of(defaults))
    docs.push_back(
        {k.path, config_keys::type_name(k.target), config_keys::value_text(k.target), k.doc});
  return docs;
}

std::set<std::string> given_keys(const std::string& path,
                                 const std::vector<std::string>& overrides) {
  toml::table root;
  if (!path.empty()) root = toml::parse_file(path);  // load_run_config has checked it
  for (const auto& o : overrides) apply_override(root, o);
  std::set<std::string> keys;
  for (const auto& [section, value] : root)
    if (const auto* table = value.as_table())
      for (const auto& [key, _] : *table) keys.insert(fmt::format("{}.{}", section.str(), key.str()));
  return keys;
}

}  // namespace kintsugi
