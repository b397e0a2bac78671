#pragma once
// The message of the kintsugi::Error that `f` throws ("" when it throws none): one definition
// for the test files that share it (a unity build compiles several of them as one).
#include <functional>
#include <string>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kintsugi
