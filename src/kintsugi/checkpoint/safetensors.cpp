#include "kintsugi/checkpoint/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"
#include "kintsugi/data/atomic_file.hpp"

namespace kintsugi {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// A header larger than this is not a real file's (the format's reference reader caps it too).
constexpr std::uint64_t kMaxHeader = 100ull << 20;

// The number of elements of a header's shape, refusing a shape whose product or byte size does
// not fit in 64 bits: a hostile header must not reach arithmetic that overflows.
std::int64_t element_count(const fs::path& path, const std::string& name,
                           const std::vector<std::int64_t>& shape, std::size_t element) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) fail("{}: tensor {} has a negative dimension", path.string(), name);
    if (__builtin_mul_overflow(n, d, &n))
      fail("{} is corrupt: the shape of tensor {} has more elements than 64 bits can count",
           path.string(), name);
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(element), &bytes))
    fail("{} is corrupt: tensor {} has more bytes than 64 bits can count", path.string(), name);
  return n;
}
}  // namespace

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    default: fail("safetensors export writes f32, bf16 or f16, not {}", name_of(dtype));
  }
}

void write_safetensors(const fs::path& path, const std::map<std::string, NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype) {
  const std::string type = safetensors_dtype(dtype);
  const std::size_t element = size_of(dtype);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    KINTSUGI_ASSERT(n == static_cast<std::int64_t>(t.values.size()));
    const std::uint64_t bytes = t.values.size() * element;
    header[name] = {{"dtype", type}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (as the reference writer does).
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int b = 0; b < 8; ++b) prefix[b] = static_cast<unsigned char>(length >> (8 * b));
  data::AtomicFile out(path);
  out.write(prefix, 8);
  out.write(text);
  std::vector<std::uint16_t> half;
  for (const auto& [name, t] : tensors) {
    if (dtype == DType::f32) {
      out.write(t.values.data(), t.values.size() * sizeof(float));
      continue;
    }
    half.resize(t.values.size());
    for (std::size_t k = 0; k < half.size(); ++k)
      half[k] = dtype == DType::bf16 ? float_to_bf16(t.values[k]) : float_to_f16(t.values[k]);
    out.write(half.data(), half.size() * sizeof(std::uint16_t));
  }
  out.commit();
}

std::map<std::string, SafetensorsEntry> read_safetensors_header(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  unsigned char prefix[8] = {};
  if (ec || size < 8 || !in.read(reinterpret_cast<char*>(prefix), 8))
    fail("{} is not a safetensors file (shorter than its 8-byte header length)", path.string());
  std::uint64_t length = 0;
  for (int b = 0; b < 8; ++b) length |= static_cast<std::uint64_t>(prefix[b]) << (8 * b);
  if (length > kMaxHeader || 8 + length > size)
    fail("{} is not a safetensors file or is truncated (header length {} in a file of {} bytes)",
         path.string(), length, size);
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail("{} has a corrupt safetensors header: {}", path.string(), e.what());
  }
  if (!header.is_object()) fail("{} has a corrupt safetensors header", path.string());
  const std::uint64_t data_begin = 8 + length, data_bytes = size - data_begin;

  std::map<std::string, SafetensorsEntry> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      SafetensorsEntry e;
      e.dtype = t.at("dtype").get<std::string>();
      e.shape = t.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      const std::size_t element = dtype_size(e.dtype);
      if (element == 0)
        fail("{}: tensor {} has dtype {}; F32, F16 and BF16 can be read", path.string(), name,
             e.dtype);
      const std::int64_t n = element_count(path, name, e.shape, element);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_bytes)
        fail("{} is truncated or corrupt: tensor {} lies outside the file", path.string(), name);
      if (offsets[1] - offsets[0] != static_cast<std::uint64_t>(n) * element)
        fail("{} is corrupt: tensor {} has {} bytes for shape {}", path.string(), name,
             offsets[1] - offsets[0], t.at("shape").dump());
      ranges.emplace_back(offsets[0], offsets[1]);
      e.begin = data_begin + offsets[0];
      e.end = data_begin + offsets[1];
      out[name] = std::move(e);
    } catch (const json::exception& e) {
      fail("{}: the header entry of {} is malformed: {}", path.string(), name, e.what());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t k = 1; k < ranges.size(); ++k)
    if (ranges[k].first < ranges[k - 1].second)
      fail("{} is corrupt: tensors overlap in the data", path.string());
  return out;
}

std::size_t dtype_size(const std::string& dtype) {
  return dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
}

float safetensors_value(const unsigned char* data, const std::string& dtype, std::int64_t k) {
  if (dtype == "F32") {
    float x;
    std::memcpy(&x, data + 4 * k, 4);
    return x;
  }
  std::uint16_t h;
  std::memcpy(&h, data + 2 * k, 2);
  return dtype == "BF16" ? bf16_to_float(h) : f16_to_float(h);
}

std::map<std::string, NamedTensor> read_safetensors(const fs::path& path) {
  const auto header = read_safetensors_header(path);  // checked before any data is read
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::map<std::string, NamedTensor> out;
  std::vector<unsigned char> raw;
  for (const auto& [name, e] : header) {
    raw.resize(e.end - e.begin);
    in.seekg(static_cast<std::streamoff>(e.begin));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    if (!in) fail("cannot read tensor {} from {}", name, path.string());
    const std::int64_t n = static_cast<std::int64_t>(raw.size() / dtype_size(e.dtype));
    NamedTensor nt{e.shape, std::vector<float>(static_cast<std::size_t>(n))};
    for (std::int64_t k = 0; k < n; ++k) nt.values[k] = safetensors_value(raw.data(), e.dtype, k);
    out[name] = std::move(nt);
  }
  return out;
}

}  // namespace kintsugi
