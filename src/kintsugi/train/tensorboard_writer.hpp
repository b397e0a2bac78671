#pragma once
// TensorBoard event files, written without TensorFlow or a protobuf compiler.
//
// An event file ("events.out.tfevents.<seconds>.<host>") is a sequence of TFRecords:
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8). Each record's data is one
// serialized `Event` protocol buffer: the first carries file_version "brain.Event:2", the others
// a step and a `Summary` of scalar values (tag, simple_value). Only those few fields are
// encoded, by hand (docs/metrics.md lists the tags a run writes).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kintsugi {

// CRC-32C (Castagnoli), as TFRecord uses it, and its masked form.
std::uint32_t crc32c(std::string_view bytes);
std::uint32_t masked_crc32c(std::string_view bytes);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it (TensorBoard reads every event file of a
  // directory, so a resumed run adds one next to the old). kintsugi::Error if it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event with these scalars at `step`, flushed to the file at once so that a killed run
  // keeps what it logged.
  void write_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace kintsugi
