#include "kintsugi/data/jsonl.hpp"

#include <nlohmann/json.hpp>

#include "kintsugi/core/error.hpp"

namespace kintsugi::data {

std::vector<JsonlRecord> jsonl_records(std::string_view contents) {
  std::vector<JsonlRecord> records;
  std::size_t number = 0;
  for (std::size_t begin = 0; begin < contents.size();) {
    std::size_t end = contents.find('\n', begin);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view line = contents.substr(begin, end - begin);
    ++number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) records.push_back({line, number});
    begin = end + 1;
  }
  return records;
}

std::string jsonl_text(const JsonlRecord& record, std::string_view key, std::string_view file) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(record.line);
  } catch (const nlohmann::json::exception& e) {
    fail("{}:{}: not a JSON record ({}): each line must be one JSON object such as "
         "{{\"{}\": \"...\"}}", file, record.number, e.what(), key);
  }
  if (!json.is_object())
    fail("{}:{}: the record is a JSON {}, not an object with a \"{}\" string", file,
         record.number, json.type_name(), key);
  auto it = json.find(key);
  if (it == json.end())
    fail("{}:{}: the record has no \"{}\" key (choose the key with --key)", file, record.number,
         key);
  if (!it->is_string())
    fail("{}:{}: \"{}\" is a JSON {}, not a string", file, record.number, key, it->type_name());
  return it->get<std::string>();
}

}  // namespace kintsugi::data
