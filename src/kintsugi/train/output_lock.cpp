#include "kintsugi/train/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

// What the holder wrote: "host <name> pid <pid>".
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? "a process that has not written its name yet" : holder;
}

}  // namespace

OutputLock::OutputLock(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("--out {} is a file, not a directory: choose another --out", dir.string());
  fs::create_directories(dir, ec);
  if (ec)
    fail("--out {} cannot be created ({}): choose another --out", dir.string(), ec.message());
  const fs::path path = dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("cannot open {} to lock --out {}: {}", path.string(), dir.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      fail("--out {} is in use by another training run ({}): wait for it to end, stop it, or "
           "choose another --out",
           dir.string(), holder);
    fail("cannot lock {}: {}", path.string(), std::strerror(error));
  }
  const std::string me = "host " + host_name() + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    fail("cannot write {}: {}", path.string(), std::strerror(errno));
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace kintsugi
