#pragma once
// One writer per output directory. Two jobs writing the same --out would replace each other's
// checkpoints and interleave their metrics; the run holds an exclusive lock on <out>/.lock for
// its lifetime (flock(2): the kernel releases it when the process ends, however it ends, so a
// killed job leaves no stale lock), and a second job refuses to start, naming the host and pid
// of the holder, which the holder writes into the file.
//
// The metrics file may live outside --out (--metrics), where the directory's lock does not
// reach: it is locked too, as a file of its own, so that a second job naming it (whose
// --overwrite would empty it) is refused as well (docs/checkpoints.md).
#include <filesystem>
#include <vector>

namespace kintsugi {

class OutputLock {
 public:
  // Creates `dir` if needed and locks it; fails naming --out when `dir` cannot be a directory,
  // and naming the holder when another process holds the lock. `metrics`, when not empty, is
  // locked as well (created empty if it does not exist yet); one that exists and is not a
  // regular file (a pipe, /dev/null) is left alone: no run empties or removes those.
  explicit OutputLock(const std::filesystem::path& dir,
                      const std::filesystem::path& metrics = {});
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  void lock_dir(const std::filesystem::path& dir);
  void lock_metrics(const std::filesystem::path& path);
  // Opens `path` (created when missing) and takes its lock without waiting: the descriptor
  // (kept in fds_) and the errno of a failed open or lock, 0 when the lock is taken.
  struct LockAttempt;
  LockAttempt open_and_lock(const std::filesystem::path& path);
  std::vector<int> fds_;  // <out>/.lock, then the metrics file's (closing one releases it)
};

}  // namespace kintsugi
