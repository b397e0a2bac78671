#pragma once
// The directory of a run's training checkpoints, `<out>/checkpoints/`:
//
//   step-00000040/         one complete checkpoint (manifest.json + one shard file per rank)
//   step-00000060.partial/ a checkpoint being written (or whose writer died): never read
//   latest                 the name of the newest complete checkpoint, replaced atomically
//
// A checkpoint directory is renamed from ".partial" only once every file in it is synced, and
// `latest` is updated after that, so a crash at any moment leaves the previous checkpoint whole.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kintsugi {

// Whether `name` names an entry of a directory itself: not empty, not "." or "..", no '/'.
// Names read from a checkpoint (its shard files, `latest`) must be such: an edited (and
// re-signed) manifest or pointer must not lead outside the run's directory.
bool is_entry_name(const std::string& name);

// "<root>/step-00000040".
std::filesystem::path checkpoint_path(const std::filesystem::path& root, std::int64_t step);
// Where a checkpoint is written before it is complete.
std::filesystem::path partial_path(const std::filesystem::path& final_path);

// The newest complete checkpoint under root: the one `latest` names if it is complete,
// otherwise the highest step-N directory with a manifest. Empty when there is none.
// kintsugi::Error when `latest` names something that is not an entry of root.
std::optional<std::filesystem::path> newest_checkpoint(const std::filesystem::path& root);

// Removes the ".partial" directories under root that an interrupted save left (a save cut by a
// second Ctrl-C or a kill) and returns their names. Only a run holding the output directory's
// lock may call it: then no save is in progress.
std::vector<std::string> remove_interrupted_saves(const std::filesystem::path& root);

// Makes `latest` name `dir` (temporary file, sync, rename).
void update_latest(const std::filesystem::path& root, const std::filesystem::path& dir);
// Keeps `keep` complete checkpoints — `current` (the one just written) and the newest others —
// and removes the rest (keep <= 0: none) and any ".partial" directory left by an interrupted
// save. `current` is never removed, even when a run resumed from an older step saves it next
// to newer ones of the abandoned run.
void prune_checkpoints(const std::filesystem::path& root, std::int64_t keep,
                       const std::filesystem::path& current);

// What `--resume` names: "auto" (the newest checkpoint under <out>/checkpoints, or nothing when
// there is none yet) or a checkpoint directory, which must exist.
std::optional<std::filesystem::path> resolve_resume(const std::string& resume,
                                                    const std::filesystem::path& out_dir);

}  // namespace kintsugi
