#pragma once
// <out>/config.toml: the configuration a run trains with, every key written out, so that a
// resume needs none of the --set and flags retyped (docs/checkpoints.md "The saved
// configuration"). `kintsugi train` writes it (atomically) when a run starts, a resumed run
// included; `--resume` without `--config` takes the saved configuration of the run it
// continues, and the --set and flags of the resume apply on top of it. A resume with
// `--config` takes that file instead, as a new run would. Either way, the log lists every key
// that differs from the saved configuration, one line each.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kintsugi/train/run_config.hpp"

namespace kintsugi {

// The file's name in a run's output directory.
inline constexpr const char* kSavedConfigName = "config.toml";

// The saved configuration a `--resume` value continues: <out>/config.toml for "auto", the
// config.toml of the run whose checkpoint a directory <run>/checkpoints/step-N is; none for a
// checkpoint directory elsewhere or no --resume. The file may not exist (runs before it was
// written, a run that never started).
std::optional<std::filesystem::path> resumed_config_path(const std::string& resume,
                                                         const std::filesystem::path& out_dir);

// `config` (the keys as given and resolved, parallel.dp as given: 0 takes the job's ranks, so
// the file runs on any rank count) as a config file that load_run_config reads back to it.
std::string saved_config_text(const RunConfig& config);

// One log line per key whose value in `now` differs from `saved` (read from `saved_path`).
std::vector<std::string> config_change_notes(const RunConfig& saved, const RunConfig& now,
                                             const std::string& saved_path);

}  // namespace kintsugi
