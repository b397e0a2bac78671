#include "kintsugi/checkpoint/model_match.hpp"

#include <fmt/format.h>

#include "kintsugi/core/error.hpp"
#include "kintsugi/model/config_json.hpp"

namespace kintsugi {

void check_loadable_model(const nlohmann::json& saved, const ModelConfig& ours,
                          const std::string& what, const std::string& fix) {
  std::string diff;
  const nlohmann::json mine = to_json(ours);  // items() refers into it
  for (const auto& [key, value] : mine.items()) {
    if (key == "name" || key == "vocab_pad_multiple" || key == "seq_len") continue;
    const nlohmann::json theirs = saved.contains(key) ? saved.at(key) : nlohmann::json();
    if (theirs != value)
      diff += fmt::format("{}{} {} (checkpoint) vs {}", diff.empty() ? "" : ", ", key,
                          theirs.dump(), value.dump());
  }
  if (!diff.empty()) fail("{} was saved from a different model ({}): {}", what, diff, fix);
  const nlohmann::json seq = saved.contains("seq_len") ? saved.at("seq_len") : nlohmann::json();
  if (!seq.is_number_integer())
    fail("{} was saved from a different model (seq_len {} (checkpoint) vs {}): {}", what,
         seq.dump(), ours.seq_len, fix);
  const std::int64_t rows = seq.get<std::int64_t>();
  // RoPE and ALiBi compute positions; only learned positions have a table of seq_len rows.
  if (ours.learned_positions() && ours.seq_len > rows)
    fail("{} has learned position embeddings for {} positions (model.family = {}), "
         "model.seq_len = {} would use positions no weight was trained for: set model.seq_len "
         "<= {} (a shorter context keeps the first rows; llama's RoPE and bloom's ALiBi allow "
         "any length)",
         what, rows, name_of(ours.family), ours.seq_len, rows);
}

bool loadable_shape(const std::string& name, const std::vector<std::int64_t>& stored,
                    const std::vector<std::int64_t>& expected) {
  if (stored == expected) return true;
  return name == kPositionTable && stored.size() == 2 && expected.size() == 2 &&
         stored[1] == expected[1] && stored[0] > expected[0];
}

}  // namespace kintsugi
