#include "kintsugi/train/previous_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <system_error>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/saved_config.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

std::vector<std::string> previous_run_files(const fs::path& out_dir, const fs::path& metrics_path) {
  std::vector<std::string> found;
  std::error_code ec;
  // Only a file with lines in it is an earlier run's (--metrics may name a device or a pipe).
  if (fs::is_regular_file(metrics_path, ec) && fs::file_size(metrics_path, ec) > 0)
    found.push_back(metrics_path.string());
  std::vector<std::string> checkpoints;
  for (const auto& entry : fs::directory_iterator(out_dir / "checkpoints", ec))
    if (entry.is_directory() && entry.path().filename().string().rfind("step-", 0) == 0)
      checkpoints.push_back(entry.path().string());
  std::sort(checkpoints.begin(), checkpoints.end());
  found.insert(found.end(), checkpoints.begin(), checkpoints.end());
  return found;
}

void refuse_to_start_over(const fs::path& out_dir, const fs::path& metrics_path) {
  const auto found = previous_run_files(out_dir, metrics_path);
  if (found.empty()) return;
  fail("{} holds an earlier run ({}): continue it with --resume auto, or start over with "
       "--overwrite (removes its checkpoints and metrics), or choose another --out",
       out_dir.string(), fmt::join(found, ", "));
}

void remove_previous_run(const fs::path& out_dir, const fs::path& metrics_path) {
  for (const fs::path& p : {out_dir / "checkpoints", out_dir / "model", out_dir / "loss.svg",
                            out_dir / "lr.svg", out_dir / "run.json",
                            out_dir / kSavedConfigName}) {
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) fail("--overwrite: cannot remove {}: {}", p.string(), ec.message());
  }
  // Emptied, not removed: this run holds its lock on that file (OutputLock), which a new file
  // of the same name would not carry. A pipe or device is left alone.
  std::error_code ignored, ec;
  if (fs::is_regular_file(metrics_path, ignored)) fs::resize_file(metrics_path, 0, ec);
  if (ec) fail("--overwrite: cannot empty {}: {}", metrics_path.string(), ec.message());
}

}  // namespace kintsugi
