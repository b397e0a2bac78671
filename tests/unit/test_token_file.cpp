// Token files: exact on-disk layout (docs/data.md), round trips in both widths, atomic writes
// and a clear error for every way a file can be damaged.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/token_file.hpp"
#include "support/all_tokens.hpp"
#include "support/error_of.hpp"
#include "support/files.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace kintsugi::data;

namespace {

using kintsugi::testing::all_tokens;
using kintsugi::testing::kintsugi_binary;
using kintsugi::testing::read_bytes;
using kintsugi::testing::TempDir;
using kintsugi::testing::write_bytes;

template <class T> T le(const std::string& bytes, std::size_t offset) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}
template <class T> void set_le(std::string& bytes, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes[offset + i] = static_cast<char>(value >> (8 * i));
}
void reseal_header(std::string& bytes) {
  set_le<std::uint64_t>(bytes, 56, XXH3_64bits(bytes.data(), 56));
}

std::string token_file_open_error(const fs::path& path) {
  return kintsugi::testing::error_of([&] { TokenFile::open(path); });
}

}  // namespace

TEST(TokenFile, LayoutMatchesTheSpec) {
  TempDir dir;
  const std::vector<std::int32_t> tokens = {1, 2, 50256, 0, 300};
  write_token_file(dir.path / "t.bin", 50257, tokens);
  std::string bytes = read_bytes(dir.path / "t.bin");
  ASSERT_EQ(bytes.size(), 64u + 2 * tokens.size());
  EXPECT_EQ(bytes.substr(0, 8), "KTOKFILE");
  EXPECT_EQ(le<std::uint32_t>(bytes, 8), 2u);    // version
  EXPECT_EQ(le<std::uint32_t>(bytes, 12), 64u);  // header size
  EXPECT_EQ(le<std::uint32_t>(bytes, 16), 2u);   // width
  EXPECT_EQ(le<std::uint32_t>(bytes, 20), 50257u);
  EXPECT_EQ(le<std::uint64_t>(bytes, 24), tokens.size());
  EXPECT_EQ(le<std::uint64_t>(bytes, 32), XXH3_64bits(bytes.data() + 64, bytes.size() - 64));
  EXPECT_EQ(bytes.substr(40, 16), std::string(16, '\0'));  // no tokenizer given: 0
  EXPECT_EQ(le<std::uint64_t>(bytes, 56), XXH3_64bits(bytes.data(), 56));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(le<std::uint16_t>(bytes, 64 + 2 * i), tokens[i]);
}

// The tokenizer's fingerprint sits at offset 40 and reads back; a version 1 file (the same
// header, version 1, bytes 40..56 zero) still opens, with no fingerprint.
TEST(TokenFile, RecordsTheTokenizerAndReadsVersion1) {
  TempDir dir;
  const std::vector<std::int32_t> tokens = {5, 6, 7};
  write_token_file(dir.path / "t.bin", 300, tokens, 0x0123456789abcdefULL);
  std::string bytes = read_bytes(dir.path / "t.bin");
  EXPECT_EQ(le<std::uint64_t>(bytes, 40), 0x0123456789abcdefULL);
  EXPECT_EQ(bytes.substr(48, 8), std::string(8, '\0'));
  const auto file = TokenFile::open(dir.path / "t.bin");
  EXPECT_EQ(file.tokenizer().vocab_size, 300);
  EXPECT_EQ(file.tokenizer().fingerprint, 0x0123456789abcdefULL);
  EXPECT_EQ(file.version(), 2u);

  set_le<std::uint32_t>(bytes, 8, 1);
  set_le<std::uint64_t>(bytes, 40, 0);
  reseal_header(bytes);
  write_bytes(dir.path / "v1.bin", bytes);
  const auto old = TokenFile::open(dir.path / "v1.bin");
  EXPECT_EQ(old.version(), 1u);
  EXPECT_EQ(old.tokenizer().fingerprint, 0u);
  EXPECT_EQ(old.tokenizer().vocab_size, 300);
  EXPECT_EQ(all_tokens(old), tokens);
  // Version 1 reserved bytes 40..56: a fingerprint there is damage, not data.
  set_le<std::uint64_t>(bytes, 40, 7);
  reseal_header(bytes);
  write_bytes(dir.path / "v1bad.bin", bytes);
  EXPECT_THROW(TokenFile::open(dir.path / "v1bad.bin"), kintsugi::Error);
}

TEST(TokenFile, RoundTripsNarrowAndWideTokens) {
  TempDir dir;
  std::mt19937 rng(3);
  for (std::int32_t vocab : {256, 50257, 65536, 65537, 200000}) {
    std::vector<std::int32_t> tokens(10007);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % vocab);
    tokens[0] = vocab - 1;  // the largest id must survive the narrow width
    auto path = dir.path / ("v" + std::to_string(vocab) + ".bin");
    write_token_file(path, vocab, tokens);
    auto file = TokenFile::open(path);
    EXPECT_EQ(file.size(), static_cast<std::int64_t>(tokens.size()));
    EXPECT_EQ(file.vocab_size(), vocab);
    EXPECT_EQ(file.token_width(), vocab <= 65536 ? 2 : 4);
    EXPECT_EQ(fs::file_size(path), 64u + file.token_width() * tokens.size());
    EXPECT_EQ(all_tokens(file), tokens);
    std::vector<std::int32_t> middle(100);
    file.read(5000, 100, middle.data());
    EXPECT_TRUE(std::equal(middle.begin(), middle.end(), tokens.begin() + 5000));
    EXPECT_EQ(file[10006], tokens[10006]);
  }
}

TEST(TokenFile, StreamingWriterEqualsOneShot) {
  TempDir dir;
  std::vector<std::int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_token_file(dir.path / "a.bin", 1000, tokens);
  {
    TokenFileWriter writer(dir.path / "b.bin", 1000);
    writer.append(std::span(tokens).first(10));
    writer.append({});
    writer.append(std::span(tokens).subspan(10));
    EXPECT_EQ(writer.size(), 1000);
    writer.finish();
  }
  EXPECT_EQ(read_bytes(dir.path / "a.bin"), read_bytes(dir.path / "b.bin"));
}

TEST(TokenFile, EmptyFileIsValid) {
  TempDir dir;
  write_token_file(dir.path / "empty.bin", 50257, {});
  auto file = TokenFile::open(dir.path / "empty.bin");
  EXPECT_EQ(file.size(), 0);
  EXPECT_EQ(fs::file_size(dir.path / "empty.bin"), 64u);
}

TEST(TokenFile, NothingAppearsUntilFinished) {
  TempDir dir;
  const auto path = dir.path / "sub" / "t.bin";
  {
    TokenFileWriter writer(path, 100);
    writer.append(std::vector<std::int32_t>{1, 2, 3});
    EXPECT_FALSE(fs::exists(path));
  }  // abandoned: the temporary file is removed too
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir.path / "sub"));
}

TEST(TokenFile, WriterRejectsIdsOutsideTheVocabulary) {
  TempDir dir;
  TokenFileWriter writer(dir.path / "t.bin", 100);
  EXPECT_THROW(writer.append(std::vector<std::int32_t>{5, 100}), kintsugi::Error);
  EXPECT_THROW(writer.append(std::vector<std::int32_t>{-1}), kintsugi::Error);
}

TEST(TokenFile, DamagedFilesGiveClearErrors) {
  TempDir dir;
  const auto good_path = dir.path / "good.bin";
  write_token_file(good_path, 50257, std::vector<std::int32_t>{10, 20, 30, 40});
  const std::string good = read_bytes(good_path);
  const auto bad_path = dir.path / "bad.bin";

  struct Case {
    const char* name;
    std::function<void(std::string&)> damage;
    const char* expect;
  } cases[] = {
      {"missing last byte", [](std::string& b) { b.pop_back(); }, "truncated"},
      {"missing last token", [](std::string& b) { b.resize(b.size() - 2); }, "truncated"},
      {"trailing bytes", [](std::string& b) { b += "xx"; }, "trailing bytes"},
      {"shorter than header", [](std::string& b) { b.resize(30); }, "truncated"},
      {"empty", [](std::string& b) { b.clear(); }, "truncated"},
      {"wrong magic", [](std::string& b) { b[0] = 'X'; }, "not a kintsugi token file"},
      {"newer version", [](std::string& b) { set_le<std::uint32_t>(b, 8, 3); reseal_header(b); },
       "format version 3"},
      {"flipped count", [](std::string& b) { b[24] ^= 1; }, "header checksum"},
      {"flipped payload", [](std::string& b) { b[64] ^= 1; }, "payload checksum"},
      {"width disagrees with vocab",
       [](std::string& b) { set_le<std::uint32_t>(b, 16, 4); reseal_header(b); }, "inconsistent"},
      {"id beyond vocab",
       [](std::string& b) {
         set_le<std::uint32_t>(b, 20, 25);  // vocab 25, but tokens 30 and 40 are stored
         reseal_header(b);
       },
       "outside its vocabulary"},
  };
  for (const auto& c : cases) {
    std::string bytes = good;
    c.damage(bytes);
    write_bytes(bad_path, bytes);
    auto message = token_file_open_error(bad_path);
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(bad_path.string()), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find("kintsugi data tokenize"), std::string::npos) << c.name << ": " << message;
  }
  auto message = token_file_open_error(dir.path / "nope.bin");
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("nope.bin"), std::string::npos) << message;
  // A path of the user's own: how to make it, not the script that fetches the examples' data.
  EXPECT_NE(message.find("kintsugi data tokenize"), std::string::npos) << message;
  EXPECT_EQ(message.find("fetch_data.sh"), std::string::npos) << message;
}

TEST(TokenFile, MovedFromFileStaysValid) {
  TempDir dir;
  write_token_file(dir.path / "t.bin", 100, std::vector<std::int32_t>{7, 8, 9});
  auto a = TokenFile::open(dir.path / "t.bin");
  TokenFile b = std::move(a);
  EXPECT_EQ(all_tokens(b), (std::vector<std::int32_t>{7, 8, 9}));
  a = std::move(b);
  EXPECT_EQ(a[2], 9);
}

TEST(TokenFile, TokenizeCommandEndsEveryDocumentWithEot) {
  // Uses the committed tiny vocabulary so that this test needs no download.
  const fs::path tiny = fs::path(kintsugi::testing::fixtures_dir()) / "tokenizer" / "tiny";
  auto tokenizer = BpeTokenizer::load(tiny);
  TempDir dir;
  write_bytes(dir.path / "a.txt", "abab aa\n<|endoftext|>\nqrs\n");
  write_bytes(dir.path / "b.txt", "the end");
  std::string command = "'" + kintsugi_binary() + "' data tokenize --tokenizer '" +
                        tiny.string() + "' --out '" + (dir.path / "t.bin").string() + "' '" +
                        (dir.path / "a.txt").string() + "' '" + (dir.path / "b.txt").string() +
                        "' > '" + (dir.path / "log").string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  EXPECT_NE(read_bytes(dir.path / "log").find("3 documents"), std::string::npos);
  std::vector<std::int32_t> expected;
  for (const char* document : {"abab aa\n", "qrs\n", "the end"}) {
    auto ids = tokenizer.encode(document);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(tokenizer.eot_id());
  }
  auto file = TokenFile::open(dir.path / "t.bin");
  EXPECT_EQ(file.vocab_size(), tokenizer.vocab_size());
  EXPECT_EQ(all_tokens(file), expected);

  std::string info = "'" + kintsugi_binary() + "' data info '" +
                     (dir.path / "t.bin").string() + "' > /dev/null 2>&1";
  EXPECT_EQ(std::system(info.c_str()), 0);
  std::string bytes = read_bytes(dir.path / "t.bin");
  bytes.back() ^= 1;
  write_bytes(dir.path / "t.bin", bytes);
  EXPECT_NE(std::system(info.c_str()), 0);
}
