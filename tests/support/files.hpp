#pragma once
// Files in tests: a whole file's bytes read and written, and a directory of the test's own under
// the system's temporary directory.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>

namespace kintsugi::testing {

// The whole file, byte for byte ("" when it cannot be opened).
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Replaces the file's contents with `bytes`.
inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A fresh directory with a random name, removed with everything in it when the test ends.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("kintsugi_test_" + std::to_string(std::random_device{}()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes the file `name` in the directory; its path.
  std::filesystem::path write(const std::string& name, std::string_view contents) const {
    write_bytes(path / name, contents);
    return path / name;
  }
  std::string read(const std::string& name) const { return read_bytes(path / name); }
};

}  // namespace kintsugi::testing
