// Tokenizing a corpus: JSON Lines records, the same ids for any number of threads and batch
// size, text and JSONL inputs agreeing, and errors that name the file and line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/corpus.hpp"
#include "kintsugi/data/jsonl.hpp"
#include "kintsugi/data/megatron_dataset.hpp"
#include "kintsugi/data/token_file.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "support/error_of.hpp"
#include "support/files.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace kintsugi::data;
using Ids = std::vector<std::int32_t>;

namespace {

using kintsugi::testing::data_dir;
using kintsugi::testing::error_of;
using kintsugi::testing::kintsugi_binary;
using kintsugi::testing::TempDir;

const Tokenizer& gpt2_tokenizer() {
  static auto t = load_tokenizer(fs::path(data_dir()) / "gpt2-tokenizer", "--tokenizer");
  return *t;
}

std::vector<Ids> run(const std::vector<fs::path>& inputs, const CorpusOptions& options) {
  std::vector<Ids> docs;
  tokenize_corpus(gpt2_tokenizer(), inputs, options,
                  [&](std::span<const std::int32_t> ids) { docs.emplace_back(ids.begin(), ids.end()); });
  return docs;
}

}  // namespace

TEST(Jsonl, RecordsKeepTheirLineNumbers) {
  auto records = jsonl_records("{\"text\": \"a\"}\n\n  \r\n{\"text\": \"b\"}\r\n{\"text\": \"c\"}");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].number, 1u);
  EXPECT_EQ(records[1].number, 4u);
  EXPECT_EQ(records[1].line, "{\"text\": \"b\"}");
  EXPECT_EQ(records[2].number, 5u);
  EXPECT_EQ(jsonl_text(records[1], "text", "f.jsonl"), "b");
}

TEST(Jsonl, MalformedRecordsNameFileLineAndProblem) {
  struct Case {
    std::string line, expect;
  } cases[] = {{"{\"text\": \"a\"", "f.jsonl:7: not a JSON record"},
               {"[1, 2]", "f.jsonl:7: the record is a JSON array, not an object"},
               {"{\"body\": \"a\"}", "f.jsonl:7: the record has no \"text\" key"},
               {"{\"text\": 5}", "f.jsonl:7: \"text\" is a JSON number, not a string"},
               {"{\"text\": \"\xFF\"}", "f.jsonl:7: not a JSON record"}};
  for (const auto& c : cases) {
    const auto message = error_of([&] { jsonl_text({c.line, 7}, "text", "f.jsonl"); });
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  }
}

TEST(Corpus, SameIdsForAnyThreadCountAndBatchSize) {
  TempDir dir;
  std::string text;
  for (int d = 0; d < 200; ++d)
    text += "Document " + std::to_string(d) + " says hello, " + std::string(d % 7, ' ') +
            "world!\n<|endoftext|>\n";
  const auto input = dir.write("a.txt", text);
  const auto serial = run({input}, {.threads = 1});
  ASSERT_EQ(serial.size(), 200u);
  for (int threads : {2, 3, 8})
    for (std::size_t batch : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20})
      EXPECT_EQ(run({input}, {.threads = threads, .batch_bytes = batch}), serial);
  // Every document is the tokenizer's document: ids, then <|endoftext|>.
  Ids expected;
  gpt2_tokenizer().encode_document("Document 0 says hello, world!\n", expected);
  EXPECT_EQ(serial[0], expected);
}

TEST(Corpus, JsonlRecordsEqualTheSameTextDocuments) {
  TempDir dir;
  const std::vector<std::string> docs = {"first document\nwith two lines\n", "second, \"quoted\"",
                                         "third: 日本語 😀", "tabs\tand\\backslashes"};
  std::string text, jsonl;
  for (const auto& d : docs) {
    text += d + (d.ends_with('\n') ? "" : "\n") + "<|endoftext|>\n";
    jsonl += nlohmann::json{{"id", 1}, {"body", d}}.dump() + "\n";
  }
  jsonl += "{\"body\": \"\"}\n";  // empty documents are skipped, as in the text input
  const auto from_jsonl = run({dir.write("a.jsonl", jsonl)}, {.jsonl = true, .key = "body", .threads = 2});
  ASSERT_EQ(from_jsonl.size(), docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    Ids expected;
    gpt2_tokenizer().encode_document(docs[i], expected);
    EXPECT_EQ(from_jsonl[i], expected);
  }
}

TEST(Corpus, FirstBadRecordInOrderIsReported) {
  TempDir dir;
  std::string jsonl;
  for (int i = 1; i <= 50; ++i)
    jsonl += i == 17 || i == 40 ? "{oops\n" : "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  const auto input = dir.write("bad.jsonl", jsonl);
  for (int threads : {1, 2, 4}) {
    const auto message = error_of([&] { run({input}, {.jsonl = true, .threads = threads, .batch_bytes = 64}); });
    EXPECT_NE(message.find("bad.jsonl:17: not a JSON record"), std::string::npos) << message;
  }
  const auto latin1 = dir.write("latin1.txt", "caf\xE9\n");
  EXPECT_NE(error_of([&] { run({latin1}, {}); }).find("invalid UTF-8 at line 1"), std::string::npos);
}

TEST(Corpus, TokenizeCommandWritesMegatronDatasetsWithTheSameIds) {
  TempDir dir;
  const auto input = dir.write("a.txt", "one document\n<|endoftext|>\nand another one\n");
  const std::string bin = kintsugi_binary(), tok = fs::path(data_dir()) / "gpt2-tokenizer";
  for (std::string format : {"kintsugi", "megatron"}) {
    const std::string command = "'" + bin + "' data tokenize --tokenizer '" + tok + "' --format " +
                                format + " --out '" + (dir.path / format).string() + "' '" +
                                input.string() + "' > /dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  auto ours = TokenFile::open(dir.path / "kintsugi");
  auto megatron = MegatronDataset::open(dir.path / "megatron");
  EXPECT_EQ(megatron->documents(), 2);
  Ids a(ours.size()), b(megatron->size());
  ours.read(0, ours.size(), a.data());
  megatron->read(0, megatron->size(), b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.back(), 50256);
}
