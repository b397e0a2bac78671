#include "kintsugi/data/megatron_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/atomic_file.hpp"

namespace kintsugi::data {
namespace {

static_assert(std::endian::native == std::endian::little, "Megatron files are little-endian");

constexpr std::array<char, 9> kIndexMagic = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr std::string_view kRemake =
    "prepare it again (kintsugi data tokenize --format megatron, or Megatron-LM's "
    "tools/preprocess_data.py)";

// Bytes per id of a dtype code, 0 for codes that are not integer types.
int dtype_width(int code) {
  switch (code) {
    case 1: case 2: return 1;  // uint8, int8
    case 3: case 8: return 2;  // int16, uint16
    case 4: return 4;          // int32
    case 5: return 8;          // int64
    default: return 0;         // 6 float64, 7 float32, unknown
  }
}

template <class T> T load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

template <class T>
void widen_unaligned(const unsigned char* from, std::int64_t count, std::int32_t* out) {
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = static_cast<std::int32_t>(load<T>(from + i * static_cast<std::int64_t>(sizeof(T))));
}

// The smallest and largest id and where the largest first appears.
template <class T>
void min_max(const unsigned char* from, std::int64_t count, std::int64_t& lo, std::int64_t& hi,
             std::int64_t& hi_at) {
  const T* ids = reinterpret_cast<const T*>(from);
  T min = std::numeric_limits<T>::max(), max = std::numeric_limits<T>::lowest();
  for (std::int64_t i = 0; i < count; ++i) {
    min = std::min(min, ids[i]);
    max = std::max(max, ids[i]);
  }
  lo = static_cast<std::int64_t>(min);
  hi = static_cast<std::int64_t>(max);
  for (std::int64_t i = 0; i < count; ++i)
    if (ids[i] == max) {
      hi_at = i;
      break;
    }
}

}  // namespace

std::filesystem::path megatron_prefix(const std::filesystem::path& path) {
  const auto ext = path.extension();
  return ext == ".bin" || ext == ".idx" ? std::filesystem::path(path).replace_extension() : path;
}

bool is_megatron_dataset(const std::filesystem::path& path) {
  auto idx = megatron_prefix(path);
  idx += ".idx";
  return std::filesystem::exists(idx);
}

void MegatronDataset::check_index(const std::filesystem::path& idx_path) {
  const std::string name = idx_path.string();
  MappedFile idx(idx_path, "Megatron index", kRemake);
  const unsigned char* p = idx.data();
  if (idx.size() < kHeaderBytes || std::memcmp(p, kIndexMagic.data(), kIndexMagic.size()) != 0)
    fail("{} is not a Megatron index (no MMIDIDX header): {}", name, kRemake);
  const auto version = load<std::uint64_t>(p + 9);
  if (version != 1) fail("{} has index version {}, kintsugi reads version 1", name, version);
  dtype_ = p[17];
  width_ = dtype_width(dtype_);
  if (width_ == 0)
    fail("{} has dtype code {}, not an integer type (1-5 or 8): {}", name, dtype_, kRemake);
  const auto sequences = load<std::uint64_t>(p + 18), documents = load<std::uint64_t>(p + 26);
  // The size the counts describe, in checked arithmetic: a corrupt count can be large enough
  // that 12 * sequences wraps around to the file's own size.
  std::uint64_t need = 0, sequence_bytes = 0, document_bytes = 0;
  if (__builtin_mul_overflow(sequences, std::uint64_t{12}, &sequence_bytes) ||
      __builtin_mul_overflow(documents, std::uint64_t{8}, &document_bytes) ||
      __builtin_add_overflow(sequence_bytes, document_bytes, &need) ||
      __builtin_add_overflow(need, std::uint64_t{kHeaderBytes}, &need))
    fail("{} is corrupt: its counts of {} sequences and {} document entries overflow (they "
         "would need more than 2^64 bytes; the file has {}): {}",
         name, sequences, documents, idx.size(), kRemake);
  if (need != idx.size())
    fail("{} is truncated or has trailing bytes: {} sequences and {} document entries need {} "
         "bytes, the file has {} (a multimodal index with sequence modes is not supported): {}",
         name, sequences, documents, need, idx.size(), kRemake);
  if (documents < 1) fail("{} has an empty document index (it needs at least [0]): {}", name, kRemake);
  lengths_.resize(sequences);
  document_index_.resize(documents);
  const unsigned char* pointers = p + kHeaderBytes + 4 * sequences;
  // memcpy's pointers must be valid even for 0 bytes, and an empty vector's data() may be null
  // (an index of 0 sequences has no lengths).
  if (sequences > 0) std::memcpy(lengths_.data(), p + kHeaderBytes, 4 * sequences);
  std::memcpy(document_index_.data(), pointers + 8 * sequences, 8 * documents);
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < sequences; ++s) {
    if (lengths_[s] < 0) fail("{}: sequence {} has negative length {}: {}", name, s, lengths_[s], kRemake);
    const auto pointer = load<std::int64_t>(pointers + 8 * s);
    if (pointer != offset)
      fail("{}: sequence {} starts at byte {} of the .bin, expected {} (sequences must follow "
           "each other): {}", name, s, pointer, offset, kRemake);
    offset += static_cast<std::int64_t>(lengths_[s]) * width_;
    tokens_ += lengths_[s];
  }
  if (document_index_.front() != 0 || document_index_.back() != static_cast<std::int64_t>(sequences) ||
      !std::is_sorted(document_index_.begin(), document_index_.end()))
    fail("{}: the document index must rise from 0 to the sequence count {}, got [{}, ..., {}]: {}",
         name, sequences, document_index_.front(), document_index_.back(), kRemake);
}

void MegatronDataset::scan_ids() {
  std::int64_t lo = 0, hi = -1, at = -1;
  const unsigned char* d = bin_.data();
  switch (dtype_) {
    case 1: min_max<std::uint8_t>(d, tokens_, lo, hi, at); break;
    case 2: min_max<std::int8_t>(d, tokens_, lo, hi, at); break;
    case 3: min_max<std::int16_t>(d, tokens_, lo, hi, at); break;
    case 4: min_max<std::int32_t>(d, tokens_, lo, hi, at); break;
    case 5: min_max<std::int64_t>(d, tokens_, lo, hi, at); break;
    default: min_max<std::uint16_t>(d, tokens_, lo, hi, at); break;
  }
  if (tokens_ == 0) return;
  if (lo < 0) fail("{} holds a negative token id ({}): {}", bin_path_.string(), lo, kRemake);
  if (hi > std::numeric_limits<std::int32_t>::max())
    fail("{} holds token id {}, beyond 32 bits", bin_path_.string(), hi);
  max_id_ = static_cast<std::int32_t>(hi);
  max_id_position_ = at;
}

std::unique_ptr<MegatronDataset> MegatronDataset::open(const std::filesystem::path& path) {
  const auto prefix = megatron_prefix(path);
  auto idx_path = prefix, bin_path = prefix;
  idx_path += ".idx";
  bin_path += ".bin";
  std::unique_ptr<MegatronDataset> d(new MegatronDataset);
  d->bin_path_ = bin_path;
  d->check_index(idx_path);
  d->bin_ = MappedFile(bin_path, "Megatron data file", kRemake);
  if (d->bin_.size() != static_cast<std::size_t>(d->tokens_) * static_cast<std::size_t>(d->width_))
    fail("{} holds {} bytes but its index {} describes {} tokens of {} bytes ({} bytes): the two "
         "files do not belong together or one is truncated: {}", bin_path.string(),
         d->bin_.size(), idx_path.string(), d->tokens_, d->width_, d->tokens_ * d->width_, kRemake);
  d->scan_ids();
  return d;
}

void MegatronDataset::read(std::int64_t begin, std::int64_t count, std::int32_t* out) const {
  KINTSUGI_ASSERT(begin >= 0 && count >= 0 && begin <= tokens_ - count);
  const unsigned char* from = bin_.data() + begin * width_;
  switch (dtype_) {
    case 1: widen_unaligned<std::uint8_t>(from, count, out); break;
    case 2: widen_unaligned<std::int8_t>(from, count, out); break;
    case 3: widen_unaligned<std::int16_t>(from, count, out); break;
    case 4: widen_unaligned<std::int32_t>(from, count, out); break;
    case 5: widen_unaligned<std::int64_t>(from, count, out); break;
    default: widen_unaligned<std::uint16_t>(from, count, out); break;
  }
}

std::string MegatronDataset::describe() const {
  return fmt::format("Megatron indexed dataset, {} documents, {} tokens", documents(), tokens_);
}

struct MegatronWriter::Impl {
  AtomicFile bin;
  std::filesystem::path idx_path;
  std::int64_t vocab_size;
  int width;
  std::vector<std::int32_t> lengths;
  std::vector<unsigned char> buffer;
  Impl(const std::filesystem::path& bin_path, std::int64_t vocab)
      : bin(bin_path), vocab_size(vocab), width(vocab < 65500 ? 2 : 4) {}
};

MegatronWriter::MegatronWriter(const std::filesystem::path& prefix, std::int64_t vocab_size) {
  KINTSUGI_ASSERT(vocab_size > 0);
  auto bin = megatron_prefix(prefix), idx = megatron_prefix(prefix);
  bin += ".bin";
  idx += ".idx";
  impl_ = std::make_unique<Impl>(bin, vocab_size);
  impl_->idx_path = idx;
}

MegatronWriter::~MegatronWriter() = default;

void MegatronWriter::add_document(std::span<const std::int32_t> ids) {
  KINTSUGI_ASSERT(impl_);
  if (ids.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    fail("a document of {} tokens is longer than a Megatron sequence can be", ids.size());
  auto& buffer = impl_->buffer;
  buffer.resize(ids.size() * impl_->width);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= impl_->vocab_size)
      fail("cannot write token {} to {}: ids must be in [0, {})", ids[i],
           impl_->bin.path().string(), impl_->vocab_size);
    if (impl_->width == 2) {
      const auto v = static_cast<std::uint16_t>(ids[i]);
      std::memcpy(buffer.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(buffer.data() + 4 * i, &ids[i], 4);
    }
  }
  impl_->bin.write(buffer.data(), buffer.size());
  impl_->lengths.push_back(static_cast<std::int32_t>(ids.size()));
  tokens_ += static_cast<std::int64_t>(ids.size());
}

void MegatronWriter::finish() {
  KINTSUGI_ASSERT(impl_);
  const auto n = static_cast<std::uint64_t>(impl_->lengths.size());
  std::string idx(kIndexMagic.data(), kIndexMagic.size());
  auto put = [&idx](const auto& value) {
    idx.append(reinterpret_cast<const char*>(&value), sizeof value);
  };
  put(std::uint64_t{1});
  put(static_cast<std::uint8_t>(impl_->width == 2 ? 8 : 4));
  put(n);
  put(n + 1);  // one document per sequence
  for (std::int32_t length : impl_->lengths) put(length);
  std::int64_t pointer = 0;
  for (std::int32_t length : impl_->lengths) {
    put(pointer);
    pointer += static_cast<std::int64_t>(length) * impl_->width;
  }
  for (std::uint64_t d = 0; d <= n; ++d) put(static_cast<std::int64_t>(d));
  // The data first: an index never describes a data file that is not complete.
  impl_->bin.commit();
  write_text_file(impl_->idx_path, idx);
  impl_.reset();
}

}  // namespace kintsugi::data
