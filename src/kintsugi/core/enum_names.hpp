#pragma once
// Enumerations that users write as names (config keys, flags, manifests). One table per enum,
// next to the enum, gives both directions; a wrong name is an error that lists the right ones.
// Everything else compares the enum values, never the strings.
//
//   template <> struct EnumNames<Device> {
//     static constexpr std::array values = {std::pair{Device::cpu, "cpu"}, ...};
//   };
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = requires { EnumNames<E>::values; };

template <NamedEnum E>
constexpr std::string_view name_of(E value) {
  for (const auto& [v, name] : EnumNames<E>::values)
    if (v == value) return name;
  return "?";
}

// "a", "b" or "c": the accepted names, for messages and --help.
template <NamedEnum E>
std::string names_of() {
  std::string text;
  const auto& values = EnumNames<E>::values;
  for (std::size_t i = 0; i < values.size(); ++i)
    text += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == values.size() ? " or " : ", ",
                        values[i].second);
  return text;
}

// The value named `text`; otherwise a kintsugi::Error naming `what` (the key or flag).
template <NamedEnum E>
E parse_name(std::string_view text, std::string_view what) {
  for (const auto& [v, name] : EnumNames<E>::values)
    if (name == text) return v;
  fail("{} = \"{}\": use {}", what, text, names_of<E>());
}

}  // namespace kintsugi

// fmt prints a named enum by its name.
template <class E>
  requires kintsugi::NamedEnum<E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  auto format(E value, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kintsugi::name_of(value), ctx);
  }
};
