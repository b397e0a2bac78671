#include "kintsugi/data/token_file.hpp"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"
#include "kintsugi/data/fetched_files.hpp"

namespace kintsugi::data {
namespace {

// The payload is stored little-endian and read with plain loads.
static_assert(std::endian::native == std::endian::little, "token files assume a little-endian host");

constexpr std::array<char, 8> kTokenFileMagic = {'K', 'T', 'O', 'K', 'F', 'I', 'L', 'E'};
constexpr std::size_t kHeaderChecksumOffset = 56;
// What to do about a bad token file: fetch_data.sh only for the files it makes.
std::string recreate(const std::filesystem::path& path) {
  return std::string(hint_for(path,
                              "re-create it with scripts/fetch_data.sh (or `kintsugi data "
                              "tokenize`)",
                              "re-create it with `kintsugi data tokenize`"));
}

struct Header {
  std::uint32_t version = kTokenFileVersion;
  std::uint32_t header_bytes = kTokenFileHeaderBytes;
  std::uint32_t width = 0;
  std::uint32_t vocab_size = 0;
  std::uint64_t count = 0;
  std::uint64_t payload_checksum = 0;
  std::uint64_t fingerprint = 0;  // version 2 on
};

template <class T> void put(unsigned char* at, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}
template <class T> T get(const unsigned char* at) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(at[i]) << (8 * i);
  return value;
}

std::array<unsigned char, kTokenFileHeaderBytes> encode_header(const Header& h) {
  std::array<unsigned char, kTokenFileHeaderBytes> bytes{};
  std::memcpy(bytes.data(), kTokenFileMagic.data(), kTokenFileMagic.size());
  put(bytes.data() + 8, h.version);
  put(bytes.data() + 12, h.header_bytes);
  put(bytes.data() + 16, h.width);
  put(bytes.data() + 20, h.vocab_size);
  put(bytes.data() + 24, h.count);
  put(bytes.data() + 32, h.payload_checksum);
  put(bytes.data() + 40, h.fingerprint);
  put(bytes.data() + kHeaderChecksumOffset, XXH3_64bits(bytes.data(), kHeaderChecksumOffset));
  return bytes;
}

// Checks the header alone (magic first, so that a wrong file gets the clearest message).
Header decode_header(const unsigned char* bytes, const std::filesystem::path& path) {
  const std::string name = path.string();
  if (std::memcmp(bytes, kTokenFileMagic.data(), kTokenFileMagic.size()) != 0)
    fail("{} is not a kintsugi token file (wrong magic bytes): {}", name, recreate(path));
  Header h;
  h.version = get<std::uint32_t>(bytes + 8);
  if (h.version != 1 && h.version != kTokenFileVersion)
    fail("{} has token-file format version {}, this kintsugi reads versions 1 to {}: {}", name,
         h.version, kTokenFileVersion, recreate(path));
  if (get<std::uint64_t>(bytes + kHeaderChecksumOffset) !=
      XXH3_64bits(bytes, kHeaderChecksumOffset))
    fail("{} has a corrupt header (header checksum mismatch): {}", name, recreate(path));
  h.header_bytes = get<std::uint32_t>(bytes + 12);
  h.width = get<std::uint32_t>(bytes + 16);
  h.vocab_size = get<std::uint32_t>(bytes + 20);
  h.count = get<std::uint64_t>(bytes + 24);
  h.payload_checksum = get<std::uint64_t>(bytes + 32);
  // Version 1 reserved bytes 40..56; version 2 keeps the tokenizer's fingerprint in 40..48.
  if (h.version >= 2) h.fingerprint = get<std::uint64_t>(bytes + 40);
  for (std::size_t i = h.version >= 2 ? 48 : 40; i < kHeaderChecksumOffset; ++i)
    if (bytes[i] != 0) fail("{} has non-zero reserved header bytes: {}", name, recreate(path));
  if (h.header_bytes != kTokenFileHeaderBytes || h.vocab_size == 0 ||
      h.vocab_size > 0x7FFFFFFFu || h.width != static_cast<std::uint32_t>(token_width_for(h.vocab_size)))
    fail("{} has an inconsistent header (header size {}, token width {}, vocab size {}): {}", name,
         h.header_bytes, h.width, h.vocab_size, recreate(path));
  return h;
}

template <class T>
void widen(const unsigned char* from, std::int64_t count, std::int32_t* out) {
  const T* tokens = reinterpret_cast<const T*>(from);
  for (std::int64_t i = 0; i < count; ++i) out[i] = static_cast<std::int32_t>(tokens[i]);
}

// The largest token and its first position (-1 when count is 0).
template <class T> std::pair<std::int64_t, std::int64_t> max_token(const unsigned char* from,
                                                                   std::int64_t count) {
  const T* tokens = reinterpret_cast<const T*>(from);
  T largest = 0;
  for (std::int64_t i = 0; i < count; ++i) largest = std::max(largest, tokens[i]);
  for (std::int64_t i = 0; i < count; ++i)
    if (tokens[i] == largest) return {largest, i};
  return {-1, -1};
}

}  // namespace

int token_width_for(std::int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

TokenFile TokenFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  TokenFile file;
  file.path_ = path;
  file.map_ = MappedFile(path, "token file",
                         std::string(hint_for(path,
                                              "scripts/fetch_data.sh makes it (the Brown "
                                              "corpus files)",
                                              "create it with `kintsugi data tokenize`")));
  const std::size_t file_bytes = file.map_.size();
  if (file_bytes < kTokenFileHeaderBytes)
    fail("{} is truncated ({} bytes, less than the {}-byte header): {}", name, file_bytes,
         kTokenFileHeaderBytes, recreate(path));
  Header h = decode_header(file.map_.data(), path);
  // Division, not multiplication: a corrupt count must not overflow into a matching size.
  const std::size_t payload_bytes = file_bytes - kTokenFileHeaderBytes;
  if (payload_bytes % h.width != 0 || payload_bytes / h.width != h.count)
    fail("{} is truncated or has trailing bytes: the header promises {} tokens ({} bytes) but the "
         "file holds {} bytes after the header: {}",
         name, h.count, h.count * h.width, payload_bytes, recreate(path));
  const unsigned char* payload = file.map_.data() + kTokenFileHeaderBytes;
  if (XXH3_64bits(payload, payload_bytes) != h.payload_checksum)
    fail("{} is corrupt (payload checksum mismatch): {}", name, recreate(path));
  file.count_ = static_cast<std::int64_t>(h.count);
  file.vocab_size_ = static_cast<std::int32_t>(h.vocab_size);
  file.width_ = static_cast<int>(h.width);
  file.checksum_ = h.payload_checksum;
  file.fingerprint_ = h.fingerprint;
  file.version_ = h.version;
  // A checksum only proves the bytes are what the writer wrote; ids beyond the vocabulary
  // would index past the embedding table, so they are checked once here.
  const auto [largest, at] = h.width == 2 ? max_token<std::uint16_t>(payload, file.count_)
                                          : max_token<std::uint32_t>(payload, file.count_);
  if (largest >= static_cast<std::int64_t>(h.vocab_size))
    fail("{} holds token {} at position {}, outside its vocabulary of {}: {}", name, largest, at,
         h.vocab_size, recreate(path));
  file.max_id_ = static_cast<std::int32_t>(largest);
  file.max_id_position_ = at;
  return file;
}

std::string TokenFile::describe() const {
  return fmt::format("kintsugi token file, {} tokens", count_);
}

void TokenFile::read(std::int64_t begin, std::int64_t count, std::int32_t* out) const {
  KINTSUGI_ASSERT(begin >= 0 && count >= 0 && begin <= count_ - count);
  const unsigned char* from = map_.data() + kTokenFileHeaderBytes + begin * width_;
  if (width_ == 2)
    widen<std::uint16_t>(from, count, out);
  else
    widen<std::uint32_t>(from, count, out);
}

std::int32_t TokenFile::operator[](std::int64_t i) const {
  std::int32_t token;
  read(i, 1, &token);
  return token;
}

struct TokenFileWriter::Impl {
  AtomicFile file;
  Header header;
  XXH3_state_t* hash = XXH3_createState();
  std::vector<unsigned char> buffer;
  explicit Impl(const std::filesystem::path& path) : file(path) {}
  ~Impl() { XXH3_freeState(hash); }
};

TokenFileWriter::TokenFileWriter(const std::filesystem::path& path, std::int32_t vocab_size,
                                 std::uint64_t fingerprint) {
  KINTSUGI_ASSERT(vocab_size > 0);
  impl_ = std::make_unique<Impl>(path);
  if (!impl_->hash) throw std::bad_alloc();
  XXH3_64bits_reset(impl_->hash);
  impl_->header.vocab_size = static_cast<std::uint32_t>(vocab_size);
  impl_->header.fingerprint = fingerprint;
  impl_->header.width = static_cast<std::uint32_t>(token_width_for(vocab_size));
  // Placeholder; finish() writes the real header once count and checksum are known.
  std::array<unsigned char, kTokenFileHeaderBytes> zeros{};
  impl_->file.write(zeros.data(), zeros.size());
}

TokenFileWriter::~TokenFileWriter() = default;

void TokenFileWriter::append(std::span<const std::int32_t> tokens) {
  KINTSUGI_ASSERT(impl_);
  const auto vocab = static_cast<std::int64_t>(impl_->header.vocab_size);
  const std::size_t width = impl_->header.width;
  auto& buffer = impl_->buffer;
  buffer.resize(tokens.size() * width);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("cannot write token {} to {}: ids must be in [0, {}) for this vocabulary", tokens[i],
           impl_->file.path().string(), vocab);
    if (width == 2)
      put(buffer.data() + 2 * i, static_cast<std::uint16_t>(tokens[i]));
    else
      put(buffer.data() + 4 * i, static_cast<std::uint32_t>(tokens[i]));
  }
  impl_->file.write(buffer.data(), buffer.size());
  XXH3_64bits_update(impl_->hash, buffer.data(), buffer.size());
  count_ += static_cast<std::int64_t>(tokens.size());
}

void TokenFileWriter::finish() {
  KINTSUGI_ASSERT(impl_);
  impl_->header.count = static_cast<std::uint64_t>(count_);
  impl_->header.payload_checksum = XXH3_64bits_digest(impl_->hash);
  auto header = encode_header(impl_->header);
  impl_->file.write_at(0, header.data(), header.size());
  impl_->file.commit();
  impl_.reset();
}

void write_token_file(const std::filesystem::path& path, std::int32_t vocab_size,
                      std::span<const std::int32_t> tokens, std::uint64_t fingerprint) {
  TokenFileWriter writer(path, vocab_size, fingerprint);
  writer.append(tokens);
  writer.finish();
}

}  // namespace kintsugi::data
