#pragma once
// A JSON fixture read whole; a missing file fails the test, naming it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace kintsugi::testing {

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

}  // namespace kintsugi::testing
