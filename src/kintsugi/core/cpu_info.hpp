#pragma once
// This machine's CPU, as /proc/cpuinfo names it (keys measurements cached per machine).
#include <string>

namespace kintsugi {

std::string cpu_model_name();

}  // namespace kintsugi
