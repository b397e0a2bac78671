#pragma once
// A test's scratch directory: under the build tree (testing::scratch_root()), not /tmp, named per
// process, emptied when made and removed when the test ends, passed or failed, so that no run
// of the suite leaves directories behind.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "support/test_paths.hpp"

namespace kintsugi {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::path(testing::scratch_root()) /
              (name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;  // a destructor must not throw; the build tree holds what is left
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kintsugi
