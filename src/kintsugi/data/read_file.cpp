#include "kintsugi/data/read_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {

namespace {

bool read_all(std::FILE* file, std::string& bytes) {
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) bytes.append(buffer, n);
  return !std::ferror(file);
}

}  // namespace

std::string read_file(const std::filesystem::path& path, std::string_view fix) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) fail("cannot read {}: {}; {}", path.string(), std::strerror(errno), fix);
  std::string bytes;
  if (!read_all(file.get(), bytes))
    fail("cannot read {}: {}; {}", path.string(), std::strerror(errno), fix);
  return bytes;
}

std::string read_stdin() {
  std::string bytes;
  if (!read_all(stdin, bytes)) fail("cannot read standard input: {}", std::strerror(errno));
  return bytes;
}

}  // namespace kintsugi::data
