#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace kintsugi::data {

// The whole file as bytes; kintsugi::Error naming the file, the reason and `fix` when it
// cannot be read.
std::string read_file(const std::filesystem::path& path, std::string_view fix);

// All of standard input as bytes (binary: no newline translation).
std::string read_stdin();

}  // namespace kintsugi::data
