#include "kintsugi/train/config_agreement.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "kintsugi/comm/launch.hpp"
#include "kintsugi/data/token_source.hpp"

namespace kintsugi {

namespace {

// "section.key" -> "value" for every line of a TOML text with one level of sections.
std::vector<std::pair<std::string, std::string>> entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    out.emplace_back((section.empty() ? "" : section + ".") + line.substr(0, eq),
                     line.substr(eq + 3));
  }
  return out;
}

// A token source's identity without reading all of it: its length and a hash of 64 windows of
// 64 tokens spread evenly over it (a token file's own checksum is verified when it is opened).
std::string source_fingerprint(const data::TokenSource& source) {
  const std::int64_t n = source.size(), window = std::min<std::int64_t>(64, n);
  std::vector<std::int32_t> sample;
  for (int k = 0; k < 64 && window > 0; ++k) {
    const std::int64_t begin = (n - window) * k / 63;
    sample.resize(sample.size() + static_cast<std::size_t>(window));
    source.read(begin, window, sample.data() + sample.size() - window);
  }
  const std::string_view bytes(reinterpret_cast<const char*>(sample.data()),
                               sample.size() * sizeof(std::int32_t));
  return fmt::format("{} tokens, sample hash {:016x}", n, std::hash<std::string_view>{}(bytes));
}

}  // namespace

std::string config_fingerprint(const RunConfig& config, const TrainInputs& inputs) {
  // Data paths may differ (node-local copies); the files' contents may not.
  std::string text;
  for (const auto& [key, value] : entries(run_config_toml(config)))
    if (!key.starts_with("data.")) text += key + " = " + value + "\n";
  for (std::size_t k = 0; k < inputs.train.num_sources(); ++k)
    text += fmt::format("data.train source {} = {}\n", k,
                        source_fingerprint(inputs.train.tokens(k)));
  if (inputs.val) text += fmt::format("data.val = {}\n", source_fingerprint(inputs.val->tokens()));
  return text;
}

std::string first_difference(const std::string& mine, const std::string& theirs) {
  if (mine == theirs) return "";
  const auto a = entries(mine), b = entries(theirs);
  std::map<std::string, std::string> by_key(b.begin(), b.end());
  for (const auto& [key, value] : a) {
    const auto it = by_key.find(key);
    const std::string other = it == by_key.end() ? "(missing)" : it->second;
    if (other != value) return fmt::format("{} = {} (rank 0) vs {}", key, value, other);
  }
  return "the configurations differ";  // same keys and values in another order: not expected
}

void agree_on_config(Communicator& world, const RunConfig& config, const TrainInputs& inputs,
                     const std::string& flags) {
  const std::string mine = flags + config_fingerprint(config, inputs);
  const std::vector<std::string> all = world.host_gather(mine, 0);
  std::string error;
  if (world.rank() == 0) {
    // The first rank that differs names the key; every rank that differs is listed.
    std::string first;
    std::vector<int> ranks;
    for (int r = 1; r < world.size(); ++r) {
      const std::string d = first_difference(mine, all[static_cast<std::size_t>(r)]);
      if (d.empty()) continue;
      if (first.empty()) first = fmt::format("{}{}", d, " (rank " + std::to_string(r) + ")");
      ranks.push_back(r);
    }
    if (!ranks.empty())
      error = fmt::format("the ranks of this job were given different configurations: {}; "
                          "ranks {} differ from rank 0. Launch every rank with the same config, "
                          "flags and data files",
                          first, fmt::join(ranks, ", "));
  }
  agree_on_error(&world, error);
}

}  // namespace kintsugi
