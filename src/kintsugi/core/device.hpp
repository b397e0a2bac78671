#pragma once
// Where memory lives and ops run. Every Tensor carries its device; a Backend runs on one device
// and allocates there (core/allocator.hpp).
#include <cstdint>
#include <string_view>

namespace kintsugi {

enum class Device : std::uint8_t { cpu, cuda };

constexpr std::string_view name_of(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// "cpu" or "cuda"; anything else is a kintsugi::Error naming `what` (the key or flag).
Device parse_device(std::string_view text, std::string_view what);

}  // namespace kintsugi
