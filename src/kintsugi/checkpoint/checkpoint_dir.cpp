#include "kintsugi/checkpoint/checkpoint_dir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPartial = ".partial";

// The step of a complete checkpoint directory "step-N" (with its manifest), else -1.
std::int64_t complete_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0) return -1;
  const std::string digits = name.substr(5);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  std::error_code ec;
  if (!fs::is_regular_file(dir / "manifest.json", ec)) return -1;
  return std::stoll(digits);
}

std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::int64_t step = complete_step(entry.path());
    if (step >= 0) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool is_entry_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

fs::path checkpoint_path(const fs::path& root, std::int64_t step) {
  return root / fmt::format("step-{:08d}", step);
}

fs::path partial_path(const fs::path& final_path) { return final_path.string() + kPartial; }

std::optional<fs::path> newest_checkpoint(const fs::path& root) {
  std::ifstream in(root / "latest");
  std::string name;
  if (in && std::getline(in, name)) {
    if (!is_entry_name(name))
      fail("{} names \"{}\", which is not a checkpoint directory in {}: it was edited or damaged; "
           "remove it (then the newest complete step-N is taken) or --resume a checkpoint by "
           "its directory",
           (root / "latest").string(), name, root.string());
    if (complete_step(root / name) >= 0) return root / name;
  }
  // No pointer, or one whose target is gone: the directories themselves decide.
  const auto all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

void update_latest(const fs::path& root, const fs::path& dir) {
  data::AtomicFile latest(root / "latest");
  latest.write(dir.filename().string() + "\n");
  latest.commit();
}

std::vector<std::string> remove_interrupted_saves(const fs::path& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> partial;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 8 && name.ends_with(kPartial)) partial.push_back(entry.path());
  }
  for (const fs::path& p : partial) {
    std::error_code remove_ec;
    fs::remove_all(p, remove_ec);
    if (!remove_ec) removed.push_back(p.filename().string());
  }
  return removed;
}

void prune_checkpoints(const fs::path& root, std::int64_t keep, const fs::path& current) {
  std::error_code ec;
  remove_interrupted_saves(root);
  if (keep <= 0) return;
  std::vector<fs::path> others;  // oldest first
  for (const auto& [step, dir] : complete_checkpoints(root))
    if (dir.filename() != current.filename()) others.push_back(dir);
  const std::size_t kept_others = static_cast<std::size_t>(keep - 1);
  for (std::size_t k = 0; k + kept_others < others.size(); ++k) fs::remove_all(others[k], ec);
}

std::optional<fs::path> resolve_resume(const std::string& resume, const fs::path& out_dir) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") return newest_checkpoint(out_dir / "checkpoints");
  const fs::path dir = resume;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("--resume {}: no such checkpoint directory (give a step-N directory under "
         "<out>/checkpoints, or --resume auto)",
         resume);
  return dir;
}

}  // namespace kintsugi
