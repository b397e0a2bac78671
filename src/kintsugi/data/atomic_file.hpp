#pragma once
// Output files that appear complete or not at all: data goes to "<path>.tmp.<pid>" and is
// renamed over `path` by commit(). A crash or an error leaves no half-written file that a
// later run (or scripts/fetch_data.sh) could mistake for a finished one.
#include <cstdio>
#include <filesystem>
#include <string_view>

namespace kintsugi::data {

class AtomicFile {
 public:
  // Creates the parent directory if needed; kintsugi::Error if the file cannot be created.
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites bytes already written at `offset` (headers filled in at the end).
  void write_at(std::size_t offset, const void* data, std::size_t bytes);
  // Flushes, syncs and renames onto the final path.
  void commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void fail_io(std::string_view action) const;
  std::filesystem::path path_, temp_;
  std::FILE* file_ = nullptr;
};

// The whole file at once, atomically.
void write_text_file(const std::filesystem::path& path, std::string_view contents);

}  // namespace kintsugi::data
