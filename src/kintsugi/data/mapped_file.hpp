#pragma once
// A whole file mapped read-only into memory (token files, Megatron datasets).
#include <cstddef>
#include <filesystem>
#include <string_view>

namespace kintsugi::data {

class MappedFile {
 public:
  MappedFile() = default;
  // kintsugi::Error naming the file (`what` says which kind, e.g. "token file") and `fix` when
  // it is missing or cannot be mapped.
  MappedFile(const std::filesystem::path& path, std::string_view what, std::string_view fix);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace kintsugi::data
