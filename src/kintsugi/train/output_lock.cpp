#include "kintsugi/train/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_name.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

// What the holder wrote: "host <name> pid <pid>".
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? "a process that has not written its name yet" : holder;
}

}  // namespace

struct OutputLock::LockAttempt {
  int fd = -1;    // the open file; -1: the open failed
  int error = 0;  // errno of the failed open or lock (EWOULDBLOCK: another process holds it)
};

OutputLock::OutputLock(const fs::path& dir, const fs::path& metrics) {
  try {
    lock_dir(dir);
    if (!metrics.empty()) lock_metrics(metrics);
  } catch (...) {  // no destructor runs: what was locked is released here
    for (const int fd : fds_) ::close(fd);
    throw;
  }
}

void OutputLock::lock_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("--out {} is a file, not a directory: choose another --out", dir.string());
  fs::create_directories(dir, ec);
  if (ec)
    fail("--out {} cannot be created ({}): choose another --out", dir.string(), ec.message());
  const fs::path path = dir / ".lock";
  const auto [fd, error] = open_and_lock(path);
  if (fd < 0)
    fail("cannot open {} to lock --out {}: {}", path.string(), dir.string(), std::strerror(error));
  if (error == EWOULDBLOCK)
    fail("--out {} is in use by another training run ({}): wait for it to end, stop it, or "
         "choose another --out",
         dir.string(), holder_of(fd));
  if (error != 0) fail("cannot lock {}: {}", path.string(), std::strerror(error));
  const std::string me = "host " + host_name() + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    fail("cannot write {}: {}", path.string(), std::strerror(errno));
}

// The metrics file itself is locked. The holder's name cannot go into it (its lines are the
// run's), so a refusal names the file only.
void OutputLock::lock_metrics(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    if (fs::is_directory(path, ec))
      fail("--metrics {} is a directory: name the file to write, e.g. {}", path.string(),
           (path / "metrics.jsonl").string());
    return;
  }
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  const auto [fd, error] = open_and_lock(path);
  if (fd < 0)
    fail("cannot open the metrics file {}: {}: choose another --metrics/--out", path.string(),
         std::strerror(error));
  if (error == EWOULDBLOCK)
    fail("--metrics {} is in use by another training run, which writes its metrics there: "
         "wait for it to end, stop it, or choose another --metrics",
         path.string());
  if (error != 0) fail("cannot lock the metrics file {}: {}", path.string(), std::strerror(error));
}

// An opened file joins fds_ whether or not the lock is taken: the destructor (or the
// constructor, when a later step fails) closes it.
OutputLock::LockAttempt OutputLock::open_and_lock(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return {.fd = -1, .error = errno};
  fds_.push_back(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return {.fd = fd, .error = errno};
  return {.fd = fd, .error = 0};
}

OutputLock::~OutputLock() {
  for (const int fd : fds_) ::close(fd);  // releases the locks
}

}  // namespace kintsugi
