#pragma once
// Megatron-LM's indexed datasets ("mmap" implementation): PREFIX.bin holds the token ids of
// every document back to back, PREFIX.idx the index (all integers little-endian):
//   offset            size  field
//        0               9  magic "MMIDIDX\0\0"
//        9               8  version, 1
//       17               1  dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
//       18               8  sequence count S
//       26               8  document count D + 1
//       34             4 S  sequence lengths (int32, tokens)
//    34+4S             8 S  sequence pointers (int64, byte offsets into .bin)
//   34+12S       8 (D + 1)  document index (int64): document d is sequences [idx[d], idx[d+1])
// The writer follows Megatron's preprocess_data.py: one sequence per document, uint16 ids when
// the vocabulary has fewer than 65500 entries, int32 otherwise. The reader serves the .bin as
// one stream in sequence order (as Megatron's GPT dataset concatenates documents).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "kintsugi/data/mapped_file.hpp"
#include "kintsugi/data/token_source.hpp"

namespace kintsugi::data {

// PREFIX for a path naming PREFIX, PREFIX.bin or PREFIX.idx.
std::filesystem::path megatron_prefix(const std::filesystem::path& path);
// Whether `path` names a Megatron dataset whose .idx exists.
bool is_megatron_dataset(const std::filesystem::path& path);

class MegatronDataset final : public TokenSource {
 public:
  // Maps and validates both files: kintsugi::Error naming the file and what is wrong (magic,
  // version, dtype, sizes, pointers, document index, negative ids).
  static std::unique_ptr<MegatronDataset> open(const std::filesystem::path& path);

  std::int64_t size() const override { return tokens_; }
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const override;
  const std::filesystem::path& path() const override { return bin_path_; }
  std::int32_t max_id() const override { return max_id_; }
  std::int64_t max_id_position() const override { return max_id_position_; }
  std::string describe() const override;

  std::int64_t documents() const { return static_cast<std::int64_t>(document_index_.size()) - 1; }
  std::int64_t sequences() const { return static_cast<std::int64_t>(lengths_.size()); }
  int dtype_code() const { return dtype_; }

 private:
  MegatronDataset() = default;
  void check_index(const std::filesystem::path& idx_path);
  void scan_ids();
  std::filesystem::path bin_path_;
  MappedFile bin_;
  std::vector<std::int32_t> lengths_;
  std::vector<std::int64_t> document_index_;
  int dtype_ = 0, width_ = 0;
  std::int64_t tokens_ = 0;
  std::int32_t max_id_ = -1;
  std::int64_t max_id_position_ = -1;
};

// Writes PREFIX.bin and PREFIX.idx; nothing is visible under those names until finish().
class MegatronWriter {
 public:
  MegatronWriter(const std::filesystem::path& prefix, std::int64_t vocab_size);
  ~MegatronWriter();
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;

  // One document (one sequence); kintsugi::Error for an id outside [0, vocab_size).
  void add_document(std::span<const std::int32_t> ids);
  std::int64_t tokens() const { return tokens_; }
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::int64_t tokens_ = 0;
};

}  // namespace kintsugi::data
