#pragma once
// One writer per output directory. Two jobs writing the same --out would replace each other's
// checkpoints and interleave their metrics; the run holds an exclusive lock on <out>/.lock for
// its lifetime (flock(2): the kernel releases it when the process ends, however it ends, so a
// killed job leaves no stale lock), and a second job refuses to start, naming the host and pid
// of the holder, which the holder writes into the file.
#include <filesystem>

namespace kintsugi {

class OutputLock {
 public:
  // Creates `dir` if needed and locks it; fails naming --out when `dir` cannot be a directory,
  // and naming the holder when another process holds the lock.
  explicit OutputLock(const std::filesystem::path& dir);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kintsugi
