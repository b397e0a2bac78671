#pragma once
// Token files: the training and validation data, one flat stream of token ids per file.
//
// Layout (all integers little-endian; spec and rationale in docs/data.md):
//   offset size  field
//        0    8  magic "KTOKFILE"
//        8    4  format version (2; version 1 files, without the fingerprint, are read too)
//       12    4  header size in bytes (64)
//       16    4  token width in bytes: 2 (uint16) if vocab_size <= 65536, else 4 (uint32)
//       20    4  vocab size: every token is < this
//       24    8  token count N
//       32    8  XXH3-64 (seed 0) of the payload
//       40    8  fingerprint of the tokenizer that made the ids (Tokenizer::fingerprint;
//                  0: not recorded, as in every version 1 file)
//       48    8  reserved, zero
//       56    8  XXH3-64 (seed 0) of bytes [0, 56): the header validates itself
//       64  N*w  the tokens
// Files are written under a temporary name and renamed when complete; readers memory-map
// them and check every field, the exact file size and both checksums before any use.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "kintsugi/data/mapped_file.hpp"
#include "kintsugi/data/tokenizer_identity.hpp"
#include "kintsugi/data/token_source.hpp"

namespace kintsugi::data {

inline constexpr std::size_t kTokenFileHeaderBytes = 64;
inline constexpr std::uint32_t kTokenFileVersion = 2;

// Bytes per token for a vocabulary: 2 when every id fits in uint16, else 4.
int token_width_for(std::int64_t vocab_size);

class TokenFile final : public TokenSource {
 public:
  // Maps and validates `path`; kintsugi::Error naming the file, the problem and the fix when
  // it is missing, truncated, of another format or version, or fails a checksum.
  static TokenFile open(const std::filesystem::path& path);

  std::int64_t size() const override { return count_; }
  std::int32_t vocab_size() const { return vocab_size_; }
  int token_width() const { return width_; }
  std::uint64_t checksum() const { return checksum_; }  // of the payload
  std::uint32_t version() const { return version_; }
  // The header's vocabulary size and tokenizer fingerprint (0 in version 1 files).
  TokenizerIdentity tokenizer() const override { return {vocab_size_, fingerprint_}; }
  const std::filesystem::path& path() const override { return path_; }
  std::int32_t max_id() const override { return max_id_; }
  std::int64_t max_id_position() const override { return max_id_position_; }
  std::string describe() const override;

  // Copies tokens [begin, begin + count) to `out`; the range must lie inside the file.
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const override;
  std::int32_t operator[](std::int64_t i) const;

 private:
  TokenFile() = default;
  std::filesystem::path path_;
  MappedFile map_;
  std::int64_t count_ = 0;
  std::int32_t vocab_size_ = 0;
  int width_ = 0;
  std::uint64_t checksum_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::uint32_t version_ = 0;
  std::int32_t max_id_ = -1;
  std::int64_t max_id_position_ = -1;
};

// Streams tokens into a new token file. Nothing is visible at `path` until finish().
class TokenFileWriter {
 public:
  // `fingerprint`: the tokenizer's (0: not known, e.g. ids made without one).
  TokenFileWriter(const std::filesystem::path& path, std::int32_t vocab_size,
                  std::uint64_t fingerprint = 0);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // kintsugi::Error if a token is outside [0, vocab_size).
  void append(std::span<const std::int32_t> tokens);
  std::int64_t size() const { return count_; }
  // Writes the header and moves the file into place.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::int64_t count_ = 0;
};

void write_token_file(const std::filesystem::path& path, std::int32_t vocab_size,
                      std::span<const std::int32_t> tokens, std::uint64_t fingerprint = 0);

}  // namespace kintsugi::data
