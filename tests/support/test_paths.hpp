#pragma once
// Where the unit tests find the repository's files, the program and their scratch space. The
// absolute paths of this checkout and build are compiled into test_paths.cpp alone: no other
// test object depends on where the repository lies, so a clone elsewhere reuses them from the
// compiler cache (scripts/compiler_cache.sh).
#include <string>

namespace kintsugi::testing {

std::string data_dir();         // <repo>/data: what scripts/fetch_data.sh fetched
std::string fixtures_dir();     // tests/fixtures: the committed fixtures
std::string configs_dir();      // configs/: the shipped run configs and cluster presets
std::string tools_dir();        // tests/tools: the checkers and scripts the tests run
std::string kintsugi_binary();  // the built program
std::string scratch_root();     // <build>/tests/scratch: where ScratchDir makes its directories

}  // namespace kintsugi::testing
