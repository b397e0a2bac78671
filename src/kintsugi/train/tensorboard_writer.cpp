#include "kintsugi/train/tensorboard_writer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_name.hpp"

namespace kintsugi {

namespace {

// Table of the reflected Castagnoli polynomial 0x82F63B78, one entry per byte value.
constexpr std::array<std::uint32_t, 256> kCrcTable = [] {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}();

// Protocol-buffer wire format: a field key is (number << 3 | wire type); wire types 0 varint,
// 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit. Fixed-width values are little-endian.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <typename T>
void put_fixed(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Event.wall_time (field 1, double).
std::string event_header() {
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_fixed(e, now_seconds());
  return e;
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", static_cast<std::int64_t>(now_seconds()),
                       host_name(), static_cast<long>(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    fail("cannot write the TensorBoard event file {}: check that {} (metrics.tensorboard_dir) "
         "is a writable directory",
         path_, dir);
  std::string first = event_header();
  put_bytes(first, 3, "brain.Event:2");  // Event.file_version
  write_record(first);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_scalars(std::int64_t step,
                                      const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;  // Summary.Value: tag (1), simple_value (2, float)
    put_bytes(v, 1, tag);
    put_varint(v, 2 << 3 | 5);
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value (repeated)
  }
  std::string event = event_header();
  put_varint(event, 2 << 3 | 0);  // Event.step
  put_varint(event, static_cast<std::uint64_t>(step));
  put_bytes(event, 5, summary);  // Event.summary
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  put_fixed(record, static_cast<std::uint64_t>(data.size()));
  put_fixed(record, masked_crc32c(record));
  record += data;
  put_fixed(record, masked_crc32c(data));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0)
    fail("cannot write the TensorBoard event file {} (disk full?)", path_);
}

}  // namespace kintsugi
