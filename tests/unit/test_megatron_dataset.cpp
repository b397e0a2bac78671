// Megatron-LM indexed datasets: files written by an independent writer that follows Megatron's
// published layout (tests/tools/megatron_index.py) read back exactly, ours read back by that
// script's reader, and every kind of damage refused with what is wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/megatron_dataset.hpp"
#include "kintsugi/data/token_source.hpp"
#include "support/all_tokens.hpp"
#include "support/error_of.hpp"
#include "support/files.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace kintsugi::data;
using TokenDocs = std::vector<std::vector<std::int32_t>>;

namespace {

using kintsugi::testing::all_tokens;
using kintsugi::testing::read_bytes;
using kintsugi::testing::TempDir;
using kintsugi::testing::write_bytes;

const std::string kScript = kintsugi::testing::tools_dir() + "/megatron_index.py";

TokenDocs random_docs(int count, std::int32_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  TokenDocs docs(count);
  for (auto& d : docs) {
    d.resize(rng() % 300);  // some empty documents too
    for (auto& id : d) id = static_cast<std::int32_t>(rng() % vocab);
  }
  docs[0].assign({0, vocab - 1});
  return docs;
}

std::vector<std::int32_t> flat(const TokenDocs& docs) {
  std::vector<std::int32_t> all;
  for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
  return all;
}

// The exit status of a shell command.
int exit_status(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string megatron_open_error(const fs::path& prefix) {
  return kintsugi::testing::error_of([&] { MegatronDataset::open(prefix); });
}

}  // namespace

TEST(MegatronDataset, ReadsFilesOfTheIndependentWriter) {
  TempDir dir;
  // uint16 (Megatron's choice below 65500 ids), int32 (above), and the other integer codes.
  for (int code : {8, 4, 1, 3, 5}) {
    const std::int32_t vocab = code == 1 ? 256 : code == 3 ? 30000 : code == 8 ? 50257 : 128256;
    const TokenDocs docs = random_docs(40, vocab, static_cast<unsigned>(code));
    const fs::path prefix = dir.path / ("py" + std::to_string(code));
    std::ofstream(dir.path / "ids.json") << nlohmann::json(docs).dump();
    ASSERT_EQ(exit_status("python3 '" + kScript + "' write '" + prefix.string() + "' " +
                          std::to_string(code) + " '" + (dir.path / "ids.json").string() + "'"),
              0);
    for (std::string suffix : {"", ".bin", ".idx"}) {
      fs::path p = prefix;
      p += suffix;
      ASSERT_TRUE(is_megatron_dataset(p)) << p;
      auto source = open_token_source(p);
      EXPECT_EQ(all_tokens(*source), flat(docs)) << "dtype code " << code;
      EXPECT_EQ(source->max_id(), vocab - 1);
    }
    auto d = MegatronDataset::open(prefix);
    EXPECT_EQ(d->documents(), 40);
    EXPECT_EQ(d->dtype_code(), code);
    std::vector<std::int32_t> middle(5);
    d->read(3, 5, middle.data());
    EXPECT_TRUE(std::equal(middle.begin(), middle.end(), flat(docs).begin() + 3));
  }
}

TEST(MegatronDataset, IndependentReaderReadsOurFiles) {
  TempDir dir;
  for (std::int32_t vocab : {50257, 128256}) {
    const TokenDocs docs = random_docs(30, vocab, 7);
    const fs::path prefix = dir.path / ("ours" + std::to_string(vocab));
    MegatronWriter writer(prefix.string() + ".bin", vocab);  // a .bin path names the prefix
    for (const auto& d : docs) writer.add_document(d);
    EXPECT_EQ(writer.tokens(), static_cast<std::int64_t>(flat(docs).size()));
    writer.finish();
    // Megatron's own rule: uint16 below 65500 ids, int32 above.
    EXPECT_EQ(MegatronDataset::open(prefix)->dtype_code(), vocab < 65500 ? 8 : 4);
    const fs::path out = dir.path / "read.json";
    ASSERT_EQ(exit_status("python3 '" + kScript + "' read '" + prefix.string() + "' > '" +
                          out.string() + "'"),
              0);
    std::ifstream in(out);
    EXPECT_EQ(nlohmann::json::parse(in).get<TokenDocs>(), docs);
  }
}

TEST(MegatronDataset, WriterRefusesIdsOutsideTheVocabularyAndLeavesNoFiles) {
  TempDir dir;
  {
    MegatronWriter writer(dir.path / "x", 100);
    writer.add_document(std::vector<std::int32_t>{1, 2});
    EXPECT_THROW(writer.add_document(std::vector<std::int32_t>{100}), kintsugi::Error);
  }
  EXPECT_FALSE(fs::exists(dir.path / "x.bin"));
  EXPECT_FALSE(fs::exists(dir.path / "x.idx"));
}

TEST(MegatronDataset, DamageIsRefusedWithWhatIsWrong) {
  TempDir dir;
  const fs::path prefix = dir.path / "d";
  {
    MegatronWriter writer(prefix, 50257);
    writer.add_document(std::vector<std::int32_t>{5, 6, 7});
    writer.add_document(std::vector<std::int32_t>{8, 9});
    writer.finish();
  }
  const fs::path idx = dir.path / "d.idx", bin = dir.path / "d.bin";
  const std::string good_idx = read_bytes(idx), good_bin = read_bytes(bin);
  struct Case {
    std::function<void(std::string& idx, std::string& bin)> damage;
    std::string expect;
  } cases[] = {
      {[](std::string& i, std::string&) { i[0] = 'X'; }, "not a Megatron index"},
      {[](std::string& i, std::string&) { i[9] = 2; }, "index version 2"},
      {[](std::string& i, std::string&) { i[17] = 7; }, "dtype code 7, not an integer type"},
      {[](std::string& i, std::string&) { i.resize(i.size() - 3); }, "truncated or has trailing bytes"},
      {[](std::string& i, std::string&) { i += "modes"; }, "truncated or has trailing bytes"},
      // 2^62 + 2 sequences: 12 times that wraps around to the true size of 2 sequences.
      {[](std::string& i, std::string&) { i[18 + 7] = 0x40; },
       "counts of 4611686018427387906 sequences and 3 document entries overflow"},
      {[](std::string& i, std::string&) { i[26 + 7] = 0x20; }, "document entries overflow"},
      {[](std::string& i, std::string&) { i[34] = static_cast<char>(0xFF); i[35] = i[36] = i[37] = static_cast<char>(0xFF); },
       "negative length"},
      {[](std::string& i, std::string&) { i[34 + 8 + 8] = 1; }, "sequence 1 starts at byte 1"},
      {[](std::string& i, std::string&) { i[i.size() - 8] = 5; }, "document index must rise"},
      {[](std::string&, std::string& b) { b.resize(b.size() - 2); }, "do not belong together or one is truncated"},
  };
  for (const auto& c : cases) {
    std::string i = good_idx, b = good_bin;
    c.damage(i, b);
    write_bytes(idx, i);
    write_bytes(bin, b);
    const std::string message = megatron_open_error(prefix);
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  }
  // Negative ids in a signed dtype.
  write_bytes(idx, good_idx);
  std::string i = good_idx;
  i[17] = 3;  // int16: the same bytes, ids read as signed
  write_bytes(idx, i);
  std::string b = good_bin;
  b[0] = b[1] = static_cast<char>(0xFF);
  write_bytes(bin, b);
  EXPECT_NE(megatron_open_error(prefix).find("negative token id (-1)"), std::string::npos)
      << megatron_open_error(prefix);
  fs::remove(bin);
  EXPECT_NE(megatron_open_error(prefix).find("does not exist"), std::string::npos);
}

// An index of no sequences (document index [0]) is well formed: it opens as 0 tokens. The
// sanitizer build checks that reading its empty length table passes no null pointer to memcpy.
TEST(MegatronDataset, AnIndexOfNoSequencesOpensAsNoTokens) {
  TempDir dir;
  {
    MegatronWriter writer(dir.path / "empty", 50257);
    writer.finish();
  }
  ASSERT_EQ(fs::file_size(dir.path / "empty.bin"), 0u);
  auto d = MegatronDataset::open(dir.path / "empty");
  EXPECT_EQ(d->size(), 0);
  EXPECT_EQ(d->documents(), 0);
}

TEST(TokenSource, IdsBeyondTheModelVocabularyNameFileIdAndPosition) {
  TempDir dir;
  {
    MegatronWriter writer(dir.path / "d", 50257);
    writer.add_document(std::vector<std::int32_t>{5, 50000, 7, 50000});
    writer.finish();
  }
  auto source = open_token_source(dir.path / "d");
  EXPECT_NO_THROW(require_ids_below(*source, 50001, "data.train"));
  try {
    require_ids_below(*source, 32000, "data.train");
    FAIL() << "expected an error";
  } catch (const kintsugi::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("d.bin holds token id 50000 (at position 1)"), std::string::npos) << m;
    EXPECT_NE(m.find("data.train"), std::string::npos) << m;
  }
}

// Ids made in memory (a prompt as a tokenizer encoded it) are checked the same way: the first id
// at or above the vocabulary, or negative, is named with its position, the vocabulary and `what`.
TEST(TokenSource, IdsInMemoryOutsideTheVocabularyAreNamed) {
  const std::vector<std::int32_t> ids{5, 120000, 7};
  EXPECT_NO_THROW(require_ids_below(std::span(ids), 120001, "the prompt", "fix"));
  for (const auto& [bad, expected] :
       {std::pair{ids, std::string("the prompt holds token id 120000 (at position 1), outside the "
                                   "model's vocabulary of 50257 (model.vocab_size): fix")},
        std::pair{std::vector<std::int32_t>{3, 4, -2}, std::string("token id -2 (at position 2)")}}) {
    try {
      require_ids_below(std::span(bad), 50257, "the prompt", "fix");
      ADD_FAILURE() << "expected an error";
    } catch (const kintsugi::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}
