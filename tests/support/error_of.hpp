#pragma once
// The message of the kintsugi::Error that f throws, or "" when it throws none: for tests that
// check what a refusal says.
#include <functional>
#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kintsugi::testing
