#pragma once
// Where kintsugi keeps what it measured about this machine (GEMM rates, local links):
// $XDG_CACHE_HOME/kintsugi, else ~/.cache/kintsugi (/tmp/.cache/kintsugi without a home).
#include <filesystem>
#include <string>

namespace kintsugi {

std::filesystem::path cache_file(const std::string& name);

}  // namespace kintsugi
