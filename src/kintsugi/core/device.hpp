#pragma once
// Where memory lives and ops run. Every Tensor carries its device; a Backend runs on one device
// and allocates there (core/allocator.hpp).
#include <array>
#include <cstdint>
#include <utility>

#include "kintsugi/core/enum_names.hpp"

namespace kintsugi {

enum class Device : std::uint8_t { cpu, cuda };

template <>
struct EnumNames<Device> {
  static constexpr std::array values = {std::pair{Device::cpu, "cpu"},
                                        std::pair{Device::cuda, "cuda"}};
};

}  // namespace kintsugi
