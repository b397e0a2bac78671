// Hugging Face tokenizer.json: ids must equal the reference implementations' on every text and
// on the whole Brown training text. Expected ids come from
// tests/fixtures/make_hf_tokenizer_fixture.mjs (@lenml/tokenizers, a port of Hugging Face's
// tokenizers, for Llama 3, Llama 3.1, Qwen2.5, Qwen3 and Mistral; llama-tokenizer-js for Llama
// 1/2).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/documents.hpp"
#include "kintsugi/data/hf_tokenizer.hpp"
#include "kintsugi/data/read_file.hpp"
#include "kintsugi/data/tokenizer.hpp"
#include "support/error_of.hpp"
#include "support/files.hpp"
#include "support/json_file.hpp"
#include "support/test_paths.hpp"

namespace fs = std::filesystem;
using kintsugi::data::Tokenizer;
using Ids = std::vector<std::int32_t>;
using nlohmann::json;

namespace {

using kintsugi::testing::error_of;
using kintsugi::testing::read_json;
using kintsugi::testing::TempDir;

const fs::path kTokenizerFixtures = fs::path(kintsugi::testing::fixtures_dir()) / "tokenizer";
const fs::path kData = kintsugi::testing::data_dir();
const char* kNames[] = {"llama3-tokenizer",   "mistral-tokenizer", "llama2-tokenizer",
                        "llama3.1-tokenizer", "qwen2.5-tokenizer", "qwen3-tokenizer"};

// Loaded once per binary; a missing download is a failure (not a skip), so that a machine
// without the data never reports these tokenizers as tested.
const Tokenizer* tokenizer(const std::string& name, std::string& error) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  static std::map<std::string, std::string> errors;
  if (!loaded.count(name) && !errors.count(name)) {
    try {
      loaded[name] = kintsugi::data::load_tokenizer(kData / name, "--tokenizer");
    } catch (const kintsugi::Error& e) {
      errors[name] = std::string(e.what()) + "\n(run scripts/fetch_data.sh)";
    }
  }
  error = errors.count(name) ? errors[name] : "";
  return loaded.count(name) ? loaded[name].get() : nullptr;
}

#define REQUIRE_TOKENIZER(var, name)                    \
  std::string var##_error;                              \
  const Tokenizer* var##_ptr = tokenizer(name, var##_error); \
  ASSERT_NE(var##_ptr, nullptr) << var##_error;         \
  const Tokenizer& var = *var##_ptr

// FNV-1a (32 bits) over the ids' little-endian bytes, as the fixture script computes it.
std::uint32_t fnv1a(const Ids& ids) {
  std::uint32_t h = 0x811c9dc5u;
  for (std::int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<std::uint32_t>(id) >> (8 * k)) & 0xFF)) * 0x01000193u;
  return h;
}

}  // namespace

TEST(HfTokenizer, KnownIdsAndSpecials) {
  REQUIRE_TOKENIZER(llama3, "llama3-tokenizer");
  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_EQ(llama3.encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(llama3.eos_id(), 128001);  // <|end_of_text|>
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_TRUE(llama3.text_prefix().empty());  // this file's post-processor adds nothing
  EXPECT_EQ(llama3.encode("<|begin_of_text|>Hi"), (Ids{128000, 13347}));

  REQUIRE_TOKENIZER(mistral, "mistral-tokenizer");
  EXPECT_EQ(mistral.vocab_size(), 32000);
  EXPECT_EQ(mistral.encode("Hello"), (Ids{22557}));
  Ids doc;
  mistral.encode_document("Hello", doc);
  EXPECT_EQ(doc, (Ids{1, 22557, 2}));  // <s> from the post-processor, </s> ends the document

  REQUIRE_TOKENIZER(llama2, "llama2-tokenizer");
  EXPECT_EQ(llama2.vocab_size(), 32000);
  EXPECT_EQ(llama2.encode("Hello"), (Ids{15043}));  // Llama 2's id, not Mistral's
  Ids with_specials;
  llama2.encode_with_specials("Hello world!", with_specials);
  EXPECT_EQ(with_specials, (Ids{1, 15043, 3186, 29991}));  // llama-tokenizer-js's README
  EXPECT_EQ(llama2.eos_id(), 2);

  // Llama 3.1: Llama 3's ids, but its post-processor puts <|begin_of_text|> before a text and its
  // tokenizer_config.json ends a document with <|eot_id|>.
  REQUIRE_TOKENIZER(llama31, "llama3.1-tokenizer");
  EXPECT_EQ(llama31.vocab_size(), 128256);
  EXPECT_EQ(llama31.encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(Ids(llama31.text_prefix().begin(), llama31.text_prefix().end()), (Ids{128000}));
  EXPECT_EQ(llama31.eos_id(), 128009);  // <|eot_id|>
  doc.clear();
  llama31.encode_document("Hi", doc);
  EXPECT_EQ(doc, (Ids{128000, 13347, 128009}));
}

// Qwen2.5 and Qwen3: byte-level BPE whose split regex takes digits one at a time, an NFC
// normalizer, chat markup as added tokens; no BOS, and the end of a document is
// tokenizer_config.json's eos_token, <|im_end|> in these (instruct) files.
TEST(HfTokenizer, QwenIdsAndSpecials) {
  REQUIRE_TOKENIZER(qwen25, "qwen2.5-tokenizer");
  // 151643 tokens and 22 added ones: fewer ids than the model's embedding rows (Qwen2.5's
  // config.json says vocab_size 152064), which is legal; more would not be.
  EXPECT_EQ(qwen25.vocab_size(), 151665);
  EXPECT_EQ(qwen25.encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(qwen25.encode(" 2024"), (Ids{220, 17, 15, 17, 19}));  // one id per digit
  EXPECT_EQ(qwen25.encode("<|im_start|>user\nhi<|im_end|>"), (Ids{151644, 872, 198, 6023, 151645}));
  EXPECT_EQ(qwen25.encode("e\u0301"), qwen25.encode("\u00e9"));  // NFC
  EXPECT_EQ(qwen25.bos_id(), std::nullopt);
  EXPECT_TRUE(qwen25.text_prefix().empty());
  EXPECT_TRUE(qwen25.text_suffix().empty());
  EXPECT_EQ(qwen25.eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(qwen25.decode(Ids{151643}), "<|endoftext|>");
  // <think> is an added token of Qwen3 only.
  EXPECT_EQ(qwen25.encode("<think>").size(), 3u);
  REQUIRE_TOKENIZER(qwen3, "qwen3-tokenizer");
  EXPECT_EQ(qwen3.vocab_size(), 151669);
  EXPECT_EQ(qwen3.encode("<think>\n</think>"), (Ids{151667, 198, 151668}));
  EXPECT_EQ(qwen3.eos_id(), 151645);
  EXPECT_EQ(qwen3.bos_id(), std::nullopt);
  Ids doc;
  qwen3.encode_document("Hello world", doc);
  EXPECT_EQ(doc, (Ids{9707, 1879, 151645}));
}

TEST(HfTokenizer, MatchesReferenceOnVariedTexts) {
  const json cases = read_json(kTokenizerFixtures / "hf_cases.json");
  const auto& texts = cases.at("texts");
  ASSERT_GT(texts.size(), 500u);
  const auto nfc_changes = cases.at("nfc_changes").get<std::set<std::size_t>>();
  for (const char* name : kNames) {
    REQUIRE_TOKENIZER(tok, name);
    const json& entry = cases.at("tokenizers").at(name);
    // A tokenizer with another's ids but on a few texts gives only those (the fixture script).
    const json& expected = entry.contains("same_as")
                               ? cases.at("tokenizers").at(entry.at("same_as").get<std::string>()).at("ids")
                               : entry.at("ids");
    const json except = entry.value("except", json::object());
    ASSERT_EQ(expected.size(), texts.size());
    const std::string_view kind(name);
    const bool sentencepiece = kind == "mistral-tokenizer" || kind == "llama2-tokenizer";
    const bool nfc = kind.starts_with("qwen");
    int compared = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const json& want = except.contains(std::to_string(i)) ? except.at(std::to_string(i)) : expected[i];
      if (want.is_null()) continue;
      const auto text = texts[i].get<std::string>();
      const auto ids = want.get<Ids>();
      EXPECT_EQ(tok.encode(text), ids) << name << ", text " << i << ": " << json(text).dump();
      // Decoding gives the text back, except where SentencePiece-style decoding cannot (a "▁"
      // in the text reads as a space, and the space prepended to the text after a special
      // token stays, as in the reference) and where an NFC normalizer changed the text.
      if (!(sentencepiece && (text.find("\u2581") != std::string::npos || text.find("<s>") != std::string::npos)) &&
          !(nfc && nfc_changes.count(i))) {
        EXPECT_EQ(tok.decode(ids), text) << name << ", text " << i << ": " << json(text).dump();
      }
      ++compared;
    }
    EXPECT_GT(compared, 450) << name;
    // The specials the post-processor puts around a text (add_special_tokens in the reference).
    for (const auto& pair : entry.value("with_specials", json::array())) {
      Ids with_specials;
      tok.encode_with_specials(pair.at(0).get<std::string>(), with_specials);
      EXPECT_EQ(with_specials, pair.at(1).get<Ids>()) << name << ": " << pair.at(0).dump();
    }
  }
}

TEST(HfTokenizer, MatchesReferenceOnBrownCorpus) {
  const json brown = read_json(kTokenizerFixtures / "hf_brown.json");
  const std::string text = kintsugi::data::read_file(kData / "brown" / "train.txt",
                                                     "run scripts/fetch_data.sh");
  const auto documents = kintsugi::data::split_documents(text);
  ASSERT_EQ(documents.size(), brown.at("documents").get<std::size_t>());
  ASSERT_GE(brown.at("tokenizers").size(), 4u);
  for (const auto& [name, expected] : brown.at("tokenizers").items()) {
    REQUIRE_TOKENIZER(tok, name);
    // Two threads, as `data tokenize` runs them: concurrent calls must agree with the reference.
    std::vector<Ids> ids(documents.size());
    auto work = [&](std::size_t first) {
      for (std::size_t d = first; d < documents.size(); d += 2) ids[d] = tok.encode(documents[d]);
    };
    std::thread other(work, 1);
    work(0);
    other.join();
    std::int64_t tokens = 0;
    for (std::size_t d = 0; d < documents.size(); ++d) {
      tokens += static_cast<std::int64_t>(ids[d].size());
      ASSERT_EQ(ids[d].size(), expected[d][0].get<std::size_t>()) << name << ", document " << d;
      ASSERT_EQ(fnv1a(ids[d]), expected[d][1].get<std::uint32_t>()) << name << ", document " << d;
    }
    EXPECT_GT(tokens, 1000000) << name;
  }
}

TEST(HfTokenizer, TinyFileCoversNormalizerFallbackAndMergeOrder) {
  auto tok = kintsugi::data::load_tokenizer(kTokenizerFixtures / "tiny_hf", "--tokenizer");
  const json cases = read_json(kTokenizerFixtures / "tiny_hf_cases.json");
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    EXPECT_EQ(tok->encode(text), c.at("ids").get<Ids>()) << json(text).dump();
    Ids with_specials;
    tok->encode_with_specials(text, with_specials);
    EXPECT_EQ(with_specials, c.at("with_specials").get<Ids>()) << json(text).dump();
  }
  // One pair at a time, lowest rank first: "ab a" (rank 0) beats merging both "a b" first.
  EXPECT_EQ(tok->encode("abab"), (Ids{4, 8, 6}));
  // NFKC: the ligature and the circled digit become "fi" and "1".
  EXPECT_EQ(tok->encode("\uFB01"), tok->encode("fi"));
  // The post-processor already ends with </s>: a document does not get a second one.
  Ids doc;
  tok->encode_document("ab", doc);
  EXPECT_EQ(doc, (Ids{1, 4, 7, 2}));
}

// GPT-2's own files as a tokenizer.json (ByteLevel pre-tokenizer with GPT-2's regex) give the
// ids of the GPT-2 reference encoder, checked against the Python reference in test_tokenizer.
TEST(HfTokenizer, Gpt2AsTokenizerJsonMatchesGpt2Files) {
  const fs::path gpt2_dir = kData / "gpt2-tokenizer";
  ASSERT_TRUE(fs::exists(gpt2_dir / "encoder.json")) << "run scripts/fetch_data.sh";
  const auto gpt2 = kintsugi::data::BpeTokenizer::load(gpt2_dir);
  json merges = json::array();
  {
    std::ifstream in(gpt2_dir / "vocab.bpe");
    std::string line;
    std::getline(in, line);  // #version
    while (std::getline(in, line))
      if (!line.empty()) merges.push_back(line);
  }
  const json file = {
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", read_json(gpt2_dir / "encoder.json")}, {"merges", merges}}}};
  TempDir dir;
  dir.write("tokenizer.json", file.dump());
  auto hf = kintsugi::data::load_tokenizer(dir.path, "--tokenizer");
  EXPECT_EQ(hf->eos_id(), 50256);
  int compared = 0;
  for (const auto& c : read_json(kTokenizerFixtures / "gpt2_cases.json")) {
    const auto text = c.at("text").get<std::string>();
    if (text.find("<|endoftext|>") != std::string::npos) continue;  // a special token here
    EXPECT_EQ(hf->encode(text), c.at("ids").get<Ids>()) << json(text).dump();
    ++compared;
  }
  EXPECT_GT(compared, 380);
  const std::string brown = kintsugi::data::read_file(kData / "brown" / "val.txt", "run scripts/fetch_data.sh");
  for (std::string_view d : kintsugi::data::split_documents(brown))
    ASSERT_EQ(hf->encode(d), gpt2.encode(d));
}

TEST(HfTokenizer, UnsupportedFilesAreRefusedByName) {
  struct Case {
    std::string model, extra, expect;
  } cases[] = {
      {R"({"type": "WordPiece", "vocab": {"a": 0}})", "", "model type \"WordPiece\" is not supported"},
      {R"({"type": "Unigram", "vocab": [["a", 0.0]]})", "", "model type \"Unigram\" is not supported"},
      {R"({"type": "BPE", "vocab": {"a": 0, "</s>": 1}, "merges": ["a b"]})", "",
       "merge 0 (a + b) uses or makes a token missing"},
      {R"({"type": "BPE", "vocab": {"a": 0, "</s>": 1}, "merges": []})",
       R"(, "pre_tokenizer": {"type": "BertPreTokenizer"})", "pre-tokenizer type \"BertPreTokenizer\""},
      {R"({"type": "BPE", "vocab": {"a": 0, "</s>": 1}, "merges": []})",
       R"(, "normalizer": {"type": "Lowercase"})", "normalizer type \"Lowercase\""},
      {R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})", "", "no end-of-document token"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    dir.write("tokenizer.json", R"({"added_tokens": [], "model": )" + c.model + c.extra + "}");
    const auto message =
        error_of([&] { kintsugi::data::load_tokenizer(dir.path, "--tokenizer"); });
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
    EXPECT_NE(message.find((dir.path / "tokenizer.json").string()), std::string::npos) << message;
  }
  TempDir dir;
  dir.write("tokenizer.json", "{not json");
  EXPECT_NE(error_of([&] { kintsugi::data::load_tokenizer(dir.path, "--tokenizer"); })
                .find("not valid JSON"),
            std::string::npos);
  TempDir empty;
  EXPECT_NE(error_of([&] { kintsugi::data::load_tokenizer(empty.path, "--tokenizer"); })
                .find("holds neither"),
            std::string::npos);
  // A model folder with only SentencePiece's tokenizer.model: one line naming the file to add.
  TempDir sentencepiece;
  sentencepiece.write("tokenizer.model", "not read");
  sentencepiece.write("tokenizer_config.json", "{}");
  const auto message =
      error_of([&] { kintsugi::data::load_tokenizer(sentencepiece.path, "--tokenizer"); });
  EXPECT_EQ(message, "--tokenizer: " + sentencepiece.path.string() +
                         " holds tokenizer.model (SentencePiece) but no tokenizer.json: kintsugi "
                         "reads tokenizer.json, not SentencePiece's own file; add the model's "
                         "tokenizer.json (transformers' AutoTokenizer.from_pretrained(folder)"
                         ".save_pretrained(folder) writes one)");
}

// Two tokens with one id would decode alike and share an embedding row: refused, naming the
// file and both tokens; an added token that repeats its vocabulary entry is the same token.
TEST(HfTokenizer, TokensSharingAnIdAreRefused) {
  struct Case {
    std::string vocab, added, expect;
  } cases[] = {
      {R"({"a": 0, "b": 0, "</s>": 1})", "[]", "tokens \"a\" and \"b\" both have the id 0"},
      {R"({"a": 0, "</s>": 1})", R"([{"id": 0, "content": "<x>", "special": true}])",
       "tokens \"a\" and \"<x>\" both have the id 0"},
      {R"({"a": 0, "</s>": 1})",
       R"([{"id": 2, "content": "<x>"}, {"id": 2, "content": "<y>"}])",
       "tokens \"<x>\" and \"<y>\" both have the id 2"},
      {R"({"a": 0, "</s>": 1})", R"([{"id": 1, "content": "</s>", "special": true}])", ""},
  };
  for (const auto& c : cases) {
    TempDir dir;
    dir.write("tokenizer.json", R"({"added_tokens": )" + c.added +
                                    R"(, "model": {"type": "BPE", "merges": [], "vocab": )" +
                                    c.vocab + "}}");
    const auto message =
        error_of([&] { kintsugi::data::load_tokenizer(dir.path, "data.tokenizer"); });
    if (c.expect.empty()) {
      EXPECT_EQ(message, "");
      continue;
    }
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
    EXPECT_EQ(message.rfind("data.tokenizer: " + (dir.path / "tokenizer.json").string(), 0), 0u)
        << message;
  }
}

TEST(HfTokenizer, DecodeRefusesIdsOutsideTheVocabulary) {
  REQUIRE_TOKENIZER(llama3, "llama3-tokenizer");
  EXPECT_NE(error_of([&] { llama3.decode(Ids{128256}); }).find("not in this tokenizer's vocabulary"),
            std::string::npos);
  EXPECT_EQ(llama3.decode(Ids{128000, 9906}), "<|begin_of_text|>Hello");
}

TEST(HfTokenizer, SavedFilesLoadBack) {
  for (const char* name : {"llama3-tokenizer", "mistral-tokenizer", "llama2-tokenizer"}) {
    REQUIRE_TOKENIZER(tok, name);
    TempDir dir;
    tok.save(dir.path, 77);
    auto again = kintsugi::data::load_tokenizer(dir.path, "--tokenizer");
    EXPECT_EQ(again->encode("Saved and loaded again: 123 日本"), tok.encode("Saved and loaded again: 123 日本"));
    EXPECT_EQ(again->eos_id(), tok.eos_id());
    // The context of the model it is saved with, not the one its files came with (Llama 2's
    // say 4096).
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir.path / "tokenizer_config.json"))
                  .at("model_max_length"),
              77)
        << name;
  }
}
