#include "kintsugi/core/cache_dir.hpp"

#include <cstdlib>

namespace kintsugi {

std::filesystem::path cache_file(const std::string& name) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path base = xdg && *xdg ? std::filesystem::path(xdg)
                                                 : std::filesystem::path(home && *home ? home : "/tmp") / ".cache";
  return base / "kintsugi" / name;
}

}  // namespace kintsugi
