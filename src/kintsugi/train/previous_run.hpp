#pragma once
// What an earlier run left in an output directory. A run that does not resume refuses to start
// over it (it would overwrite metrics.jsonl and mix its checkpoints with the old ones) unless
// asked to with --overwrite, which removes what the earlier run wrote first (docs/checkpoints.md).
#include <filesystem>
#include <string>
#include <vector>

namespace kintsugi {

// The earlier run's history in `out_dir`: the metrics file (`metrics_path`) and any training
// checkpoint under out_dir/checkpoints (complete or partial). Empty when there is none.
std::vector<std::string> previous_run_files(const std::filesystem::path& out_dir,
                                            const std::filesystem::path& metrics_path);

// kintsugi::Error naming the files and the two ways on (`--resume auto`, `--overwrite`) when
// there is such history.
void refuse_to_start_over(const std::filesystem::path& out_dir,
                          const std::filesystem::path& metrics_path);

// Removes what a run writes into out_dir (checkpoints/, model/, loss.svg, lr.svg, run.json,
// config.toml) and empties the metrics file (metrics_path, which the run has locked), and
// nothing else.
void remove_previous_run(const std::filesystem::path& out_dir,
                         const std::filesystem::path& metrics_path);

}  // namespace kintsugi
