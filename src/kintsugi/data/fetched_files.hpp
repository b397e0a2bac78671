#pragma once
// Advice for a missing or damaged data file. scripts/fetch_data.sh makes the files of a
// checkout's data/ folder (data/brown/..., data/<name>-tokenizer/...); pointing at it for any
// other path, one the user chose, would be wrong advice.
#include <filesystem>
#include <string>
#include <string_view>

namespace kintsugi::data {

// Whether `path` is one of the files scripts/fetch_data.sh writes (by its place under data/).
inline bool is_fetched_file(const std::filesystem::path& path) {
  std::error_code ec;  // an empty path has no absolute form: it is no fetched file either
  const std::string p = std::filesystem::absolute(path, ec).lexically_normal().generic_string();
  if (ec) return false;
  return p.find("/data/brown/") != std::string::npos ||
         (p.find("/data/") != std::string::npos && p.find("-tokenizer") != std::string::npos);
}

// `fetched` for a file fetch_data.sh makes, `otherwise` for any other path.
inline std::string_view hint_for(const std::filesystem::path& path, std::string_view fetched,
                                 std::string_view otherwise) {
  return is_fetched_file(path) ? fetched : otherwise;
}

}  // namespace kintsugi::data
