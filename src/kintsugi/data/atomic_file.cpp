#include "kintsugi/data/atomic_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  temp_ = path_;
  temp_ += ".tmp." + std::to_string(::getpid());
  if (path_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path_.parent_path(), ec);
    if (ec)
      fail("cannot create directory {} for {}: {}", path_.parent_path().string(), path_.string(),
           ec.message());
  }
  file_ = std::fopen(temp_.c_str(), "wb");
  if (!file_) fail_io("create");
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::error_code ignored;
    std::filesystem::remove(temp_, ignored);
  }
}

void AtomicFile::fail_io(std::string_view action) const {
  fail("cannot {} {}: {} (check the path, permissions and free disk space)", action,
       temp_.string(), std::strerror(errno));
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  KINTSUGI_ASSERT(file_);
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) fail_io("write");
}

void AtomicFile::write_at(std::size_t offset, const void* data, std::size_t bytes) {
  KINTSUGI_ASSERT(file_);
  long end = std::ftell(file_);
  if (end < 0 || std::fseek(file_, static_cast<long>(offset), SEEK_SET) != 0) fail_io("seek in");
  write(data, bytes);
  if (std::fseek(file_, end, SEEK_SET) != 0) fail_io("seek in");
}

void AtomicFile::commit() {
  KINTSUGI_ASSERT(file_);
  // fsync before rename: otherwise a power loss can leave the new name on an empty file.
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) fail_io("write");
  std::FILE* file = file_;
  file_ = nullptr;
  std::error_code ec;
  if (std::fclose(file) != 0) {
    std::string reason = std::strerror(errno);
    std::filesystem::remove(temp_, ec);
    fail("cannot close {}: {} (check free disk space)", temp_.string(), reason);
  }
  std::filesystem::rename(temp_, path_, ec);
  if (ec) {
    std::string reason = ec.message();
    std::filesystem::remove(temp_, ec);
    fail("cannot rename {} to {}: {}", temp_.string(), path_.string(), reason);
  }
}

void write_text_file(const std::filesystem::path& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

}  // namespace kintsugi::data
