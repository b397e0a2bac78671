#include "kintsugi/core/device.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

Device parse_device(std::string_view text, std::string_view what) {
  if (text == "cpu") return Device::cpu;
  if (text == "cuda") return Device::cuda;
  fail("{} is \"{}\": use \"cpu\" or \"cuda\"", what, text);
}

}  // namespace kintsugi
