#pragma once
// JSON Lines input, one document per line as Megatron-LM's tools/preprocess_data.py reads it:
// each non-blank line is a JSON object whose `key` (default "text") holds the document.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kintsugi::data {

struct JsonlRecord {
  std::string_view line;
  std::size_t number;  // 1-based line number in the file
};

// The non-blank lines of a JSONL file, in order ("\r\n" line ends are accepted).
std::vector<JsonlRecord> jsonl_records(std::string_view contents);

// The string under `key` in one record; kintsugi::Error "FILE:LINE: ..." naming what is wrong
// (not JSON, not an object, no such key, not a string).
std::string jsonl_text(const JsonlRecord& record, std::string_view key, std::string_view file);

}  // namespace kintsugi::data
