#include "kintsugi/train/saved_config.hpp"

#include <fmt/format.h>

namespace kintsugi {

namespace fs = std::filesystem;

std::optional<fs::path> resumed_config_path(const std::string& resume, const fs::path& out_dir) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") return out_dir / kSavedConfigName;
  fs::path dir = fs::path(resume).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "step-N/"
  if (dir.parent_path().filename() != "checkpoints") return std::nullopt;
  return dir.parent_path().parent_path() / kSavedConfigName;
}

std::string saved_config_text(const RunConfig& config) {
  return "# The configuration of this run, every key written out (kintsugi train writes it when "
         "a run\n# starts). `kintsugi train --resume` without --config takes it; --set and flags "
         "apply on top\n# (docs/checkpoints.md). It is also a config file: --config <this "
         "file>.\n\n" +
         run_config_toml(config);
}

std::vector<std::string> config_change_notes(const RunConfig& saved, const RunConfig& now,
                                             const std::string& saved_path) {
  std::vector<std::string> notes;
  for (const ConfigChange& c : config_changes(saved, now))
    notes.push_back(fmt::format("changed on resume: {} = {} (was {} in {})", c.key, c.after,
                                c.before, saved_path));
  return notes;
}

}  // namespace kintsugi
