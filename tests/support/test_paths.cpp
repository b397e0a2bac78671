// The one test object compiled with the paths (tests/CMakeLists.txt defines the macros for this
// file only).
#include "support/test_paths.hpp"

namespace kintsugi::testing {

std::string data_dir() { return KINTSUGI_DATA_DIR; }
std::string fixtures_dir() { return KINTSUGI_FIXTURES_DIR; }
std::string configs_dir() { return KINTSUGI_CONFIGS_DIR; }
std::string tools_dir() { return KINTSUGI_TOOLS_DIR; }
std::string kintsugi_binary() { return KINTSUGI_BINARY; }
std::string scratch_root() { return KINTSUGI_SCRATCH_DIR; }

}  // namespace kintsugi::testing
