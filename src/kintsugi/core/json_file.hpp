#pragma once
// Reading a JSON document that a file holds (a checkpoint's manifest, a Hugging Face config.json
// or weight index), with one message when it is not JSON.
#include <filesystem>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

// The JSON document read from `in`; kintsugi::Error "<what> is corrupt (not valid JSON: ...)"
// when it is not one. `what` names the file (its path).
nlohmann::json parse_json(std::istream& in, const std::string& what);

// The JSON document in the file at `path`. A file that cannot be opened fails with the message
// `missing` formats (as fail() does: it names the file and what to give instead).
template <class... Args>
nlohmann::json read_json_file(const std::filesystem::path& path,
                              fmt::format_string<Args...> missing, Args&&... args) {
  std::ifstream in(path);
  if (!in) fail(missing, std::forward<Args>(args)...);
  return parse_json(in, path.string());
}

}  // namespace kintsugi
