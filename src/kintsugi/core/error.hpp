#pragma once
// Errors a user can act on. Anything that reaches the user is a kintsugi::Error whose message
// names the problem and the fix; the CLI prints it once and exits non-zero, never a stack dump.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kintsugi {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant: a broken one is a kintsugi bug, not user input.
#define KINTSUGI_ASSERT(cond)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw std::logic_error(fmt::format("internal error: {} ({}:{})", #cond, __FILE__, __LINE__)); \
  } while (0)

}  // namespace kintsugi
