#include "kintsugi/core/json_file.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi {

nlohmann::json parse_json(std::istream& in, const std::string& what) {
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is corrupt (not valid JSON: {})", what, e.what());
  }
}

}  // namespace kintsugi
