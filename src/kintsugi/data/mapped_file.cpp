#include "kintsugi/data/mapped_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/mapping_guard.hpp"

namespace kintsugi::data {

MappedFile::MappedFile(const std::filesystem::path& path, std::string_view what,
                       std::string_view fix) {
  const std::string name = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail("{} {} does not exist: {}", what, name, fix);
    fail("cannot open {} {}: {}", what, name, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int error = errno;
    ::close(fd);
    fail("cannot stat {} {}: {}", what, name, std::strerror(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{} {} is a directory, not a file: {}", what, name, fix);
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) {  // mmap refuses empty files; an empty view is enough
    ::close(fd);
    return;
  }
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_error = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) fail("cannot map {} {}: {}", what, name, std::strerror(map_error));
  data_ = static_cast<const unsigned char*>(map);
  mapped_ = true;
  guard_mapping(data_, size_, fmt::format("{} {}", what, name));  // names it if it shrinks
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (mapped_) {
      unguard_mapping(data_);
      ::munmap(const_cast<unsigned char*>(data_), size_);
    }
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (!mapped_) return;
  unguard_mapping(data_);
  ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace kintsugi::data
