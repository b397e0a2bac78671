#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets
// into the data that follows; an optional "__metadata__" of strings), then the raw
// little-endian data. We write F32, BF16 or F16 and read all three (widened to float32).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kintsugi/core/dtype.hpp"

namespace kintsugi {

struct NamedTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// Writes `tensors` (in name order) atomically (temporary file + rename) as `dtype`: F32, or BF16
// or F16 rounded to nearest even (core/half.hpp, the rounding the optimizer gives 16-bit
// working weights: a value already of that type is written exactly).
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       DType dtype = DType::f32);

// The header's name of a dtype the writer takes ("F32", "BF16", "F16").
std::string safetensors_dtype(DType dtype);

// One tensor of a file, located by its header but not read: its dtype ("F32", "F16" or
// "BF16"), shape, and the absolute byte range [begin, end) of its data in the file.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

// Reads and checks a file's header only: its length and JSON, dtypes, shapes against byte
// ranges, ranges inside the file and not overlapping. kintsugi::Error naming the problem.
std::map<std::string, SafetensorsEntry> read_safetensors_header(const std::filesystem::path& path);

// Bytes per element of a dtype this reader takes (0: not one), and element k of data in that
// dtype widened to float32.
std::size_t dtype_size(const std::string& dtype);
float safetensors_value(const unsigned char* data, const std::string& dtype, std::int64_t k);

// Reads and checks a whole file: header length and JSON, dtypes, shapes against byte ranges,
// ranges inside the file and not overlapping. kintsugi::Error naming the problem otherwise.
std::map<std::string, NamedTensor> read_safetensors(const std::filesystem::path& path);

}  // namespace kintsugi
