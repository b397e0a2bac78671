#pragma once
// Errors a user can act on. Anything that reaches the user is a kintsugi::Error whose message
// names the problem and the fix; the CLI prints it once and exits non-zero, never a stack dump.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace kintsugi {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A message is one line and often quotes a file's content (a key, a type name, a token). A
// control byte there would cut the message short (a NUL ends what() read as a C string) or break
// it into lines, so each is written as \xNN; bytes of UTF-8 text pass unchanged. Escaping twice
// changes nothing (a backslash is printable).
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f)
      out += fmt::format("\\x{:02x}", byte);
    else
      out += c;
  }
  return out;
}

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(printable(fmt::format(format, std::forward<Args>(args)...)));
}

// Internal invariant: a broken one is a kintsugi bug, not user input.
#define KINTSUGI_ASSERT(cond)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw std::logic_error(fmt::format("internal error: {} ({}:{})", #cond, __FILE__, __LINE__)); \
  } while (0)

}  // namespace kintsugi
