// GPT-2 tokenizer: ids must equal the reference encoder's on every text. The expected ids come
// from tests/fixtures/make_tokenizer_fixture.py (an independent Python implementation of the
// reference, cross-checked against the gpt-3-encoder npm package).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "kintsugi/core/error.hpp"
#include "kintsugi/data/bpe_tokenizer.hpp"
#include "kintsugi/data/fetched_files.hpp"
#include "kintsugi/data/pretokenizer.hpp"
#include "kintsugi/data/utf8.hpp"

namespace fs = std::filesystem;
using kintsugi::data::BpeTokenizer;
using Ids = std::vector<std::int32_t>;

namespace {

const fs::path kFixtures = KINTSUGI_FIXTURES_DIR;
const fs::path kGpt2Dir = fs::path(KINTSUGI_DATA_DIR) / "gpt2-tokenizer";

// Loaded once for the whole binary; a missing download is a failure, not a skip, so that a
// machine without the data can never report the tokenizer as tested.
const BpeTokenizer* gpt2(std::string& error) {
  static std::optional<BpeTokenizer> tokenizer;
  static std::string load_error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      tokenizer = BpeTokenizer::load(kGpt2Dir);
    } catch (const kintsugi::Error& e) {
      load_error = e.what();
    }
  }
  error = load_error;
  return tokenizer ? &*tokenizer : nullptr;
}

#define REQUIRE_GPT2(name)                                                                  \
  std::string load_error_;                                                                  \
  const BpeTokenizer* name##_ptr = gpt2(load_error_);                                       \
  ASSERT_NE(name##_ptr, nullptr) << load_error_                                             \
                                 << "\n(the tokenizer tests need the GPT-2 files: run "     \
                                    "scripts/fetch_data.sh)";                               \
  const BpeTokenizer& name = *name##_ptr

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

std::vector<std::string> pieces(std::string_view text) {
  static const kintsugi::data::Pretokenizer pretokenizer;
  std::vector<std::string> out;
  auto walker = pretokenizer.pieces(text);
  std::string_view piece;
  while (walker.next(piece)) out.emplace_back(piece);
  return out;
}

// A scratch directory removed at the end of the test.
struct TokenizerScratch {
  fs::path path;
  TokenizerScratch() {
    path = fs::temp_directory_path() /
           ("kintsugi_tokenizer_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TokenizerScratch() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& contents) const {
    std::ofstream(path / name, std::ios::binary) << contents;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kintsugi::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Gpt2Tokenizer, KnownIds) {
  REQUIRE_GPT2(tok);
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_id(), 50256);
  EXPECT_EQ(tok.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok.encode("The"), (Ids{464}));
  EXPECT_EQ(tok.encode(" the"), (Ids{262}));
  EXPECT_EQ(tok.encode("\n"), (Ids{198}));
  EXPECT_EQ(tok.encode(" "), (Ids{220}));
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.decode(Ids{50256}), "<|endoftext|>");
  // Special tokens are plain text to the encoder, exactly as in the reference.
  EXPECT_NE(tok.encode("<|endoftext|>"), Ids{50256});
}

TEST(Gpt2Tokenizer, MatchesReferenceOnFixture) {
  REQUIRE_GPT2(tok);
  auto cases = read_json(kFixtures / "tokenizer" / "gpt2_cases.json");
  ASSERT_GT(cases.size(), 300u);
  for (const auto& c : cases) {
    auto text = c["text"].get<std::string>();
    auto expected = c["ids"].get<Ids>();
    EXPECT_EQ(tok.encode(text), expected) << "text: " << nlohmann::json(text).dump();
    EXPECT_EQ(tok.decode(expected), text);
  }
}

TEST(Gpt2Tokenizer, CacheDoesNotChangeResults) {
  REQUIRE_GPT2(tok);
  // Pieces repeated within one call and across calls come from the cache the second time.
  auto once = tok.encode(" hello");
  EXPECT_EQ(tok.encode(" hello hello hello"),
            (Ids{once[0], once[0], once[0]}));
  EXPECT_EQ(tok.encode(" hello"), once);
}

TEST(Gpt2Tokenizer, RoundTripsRandomUtf8) {
  REQUIRE_GPT2(tok);
  std::mt19937_64 rng(7);
  // Mostly small code points (where the pattern's classes are dense), some from every plane.
  auto random_code_point = [&]() -> char32_t {
    for (;;) {
      std::uint32_t limits[] = {0x80, 0x800, 0x10000, 0x110000};
      char32_t cp = static_cast<char32_t>(rng() % limits[rng() % 4]);
      if (cp < 0xD800 || cp > 0xDFFF) return cp;
    }
  };
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    int length = static_cast<int>(rng() % 40);
    for (int k = 0; k < length; ++k) kintsugi::data::append_utf8(text, random_code_point());
    auto ids = tok.encode(text);
    ASSERT_EQ(tok.decode(ids), text) << nlohmann::json(text).dump();
    for (auto id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
  }
}

TEST(Gpt2Tokenizer, LongRunsEncodeAndRoundTrip) {
  REQUIRE_GPT2(tok);
  // One piece each: a megabyte of spaces, of letters, of digits; BPE inside a piece must not be
  // quadratic and the regex must not run out of JIT stack.
  for (std::string text : {std::string(1 << 20, ' '), std::string(1 << 20, 'a'),
                           std::string(1 << 20, '7'), std::string(1 << 20, '!')}) {
    text += "x";
    auto ids = tok.encode(text);
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Gpt2Tokenizer, DecodeGivesExactBytesEvenMidCharacter) {
  REQUIRE_GPT2(tok);
  std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, several byte-level tokens
  auto ids = tok.encode(emoji);
  ASSERT_GT(ids.size(), 1u);
  std::string joined;
  for (auto id : ids) joined += tok.decode(Ids{id});
  EXPECT_EQ(joined, emoji);
  EXPECT_EQ(tok.decode(Ids{ids[0]}), emoji.substr(0, tok.decode(Ids{ids[0]}).size()));
}

TEST(Gpt2Tokenizer, RejectsInvalidUtf8WithOffset) {
  REQUIRE_GPT2(tok);
  for (std::string bad : {std::string("ok \xFF"), std::string("ok \xC0\xAF"),  // overlong '/'
                          std::string("ok \xED\xA0\x80"),                       // surrogate
                          std::string("ok \xE2\x82"),                           // truncated
                          std::string("ok \xF4\x90\x80\x80"),                   // > U+10FFFF
                          std::string("ok \x80")}) {                            // stray byte
    auto message = error_of([&] { tok.encode(bad); });
    EXPECT_NE(message.find("invalid UTF-8"), std::string::npos) << message;
    EXPECT_NE(message.find("byte offset 3"), std::string::npos) << message;
  }
}

TEST(Gpt2Tokenizer, DecodeRejectsOutOfRangeIds) {
  REQUIRE_GPT2(tok);
  EXPECT_NE(error_of([&] { tok.decode(Ids{50257}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.decode(Ids{-1}); }).find("out of range"), std::string::npos);
}

TEST(Gpt2Tokenizer, ConcurrentCallsAgree) {
  REQUIRE_GPT2(tok);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word" + std::to_string(i % 97) + " and more, ";
  auto expected = tok.encode(text);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = tok.encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

TEST(Pretokenizer, MatchesPythonRegexOnWhitespaceEdgeCases) {
  // Expected pieces are regex.findall(pattern, text) under Python's regex module.
  using P = std::vector<std::string>;
  // U+180E is not \s for Python regex, though PCRE2 10.42's \s matches it.
  EXPECT_EQ(pieces("a \u180E" "b"), (P{"a", " \u180E", "b"}));
  // U+001C..U+001F are "other", not space, for both (unlike Python's str.isspace).
  EXPECT_EQ(pieces("x\x1c\x1f y"), (P{"x", "\x1c\x1f", " y"}));
  EXPECT_EQ(pieces("a\x0b\x0b" "b"), (P{"a", "\x0b", "\x0b", "b"}));
  EXPECT_EQ(pieces(" \u0085x"), (P{" ", "\u0085", "x"}));
  EXPECT_EQ(pieces("a\u00A0\u00A0" "b"), (P{"a", "\u00A0", "\u00A0", "b"}));
  EXPECT_EQ(pieces("\u2028\u2028x"), (P{"\u2028", "\u2028", "x"}));
  EXPECT_EQ(pieces("x\u3000\u3000"), (P{"x", "\u3000\u3000"}));
  EXPECT_EQ(pieces("  \n  x"), (P{"  \n ", " x"}));
  EXPECT_EQ(pieces("it's  I'M"), (P{"it", "'s", " ", " I", "'", "M"}));
  EXPECT_EQ(pieces("\u0663\u00BD\u216B abc123"), (P{"\u0663\u00BD\u216B", " abc", "123"}));
}

TEST(TinyTokenizer, MergesInReferenceOrder) {
  // tiny/ has merges whose outcome depends on merging every occurrence of the best pair
  // before looking again, on repeated merge lines (last rank wins) and on overlaps ("aaa").
  auto tok = BpeTokenizer::load(kFixtures / "tokenizer" / "tiny");
  auto cases = read_json(kFixtures / "tokenizer" / "tiny_cases.json");
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    auto text = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(text), c["ids"].get<Ids>()) << "text: " << text;
  }
  EXPECT_EQ(tok.encode("abab"), (Ids{257, 257}));  // not "aba" + "b"
}

TEST(TokenizerFiles, MissingFilesNameTheFileAndTheFix) {
  TokenizerScratch dir;
  auto message = error_of([&] { BpeTokenizer::load(dir.path); });
  EXPECT_NE(message.find((dir.path / "encoder.json").string()), std::string::npos) << message;
  // A directory of the user's own: no advice to run the script that fetches the examples' data.
  EXPECT_EQ(message.find("fetch_data.sh"), std::string::npos) << message;
  EXPECT_NE(message.find("name a directory with GPT-2's encoder.json"), std::string::npos)
      << message;

  fs::copy(kFixtures / "tokenizer" / "tiny" / "encoder.json", dir.path / "encoder.json");
  message = error_of([&] { BpeTokenizer::load(dir.path); });
  EXPECT_NE(message.find((dir.path / "vocab.bpe").string()), std::string::npos) << message;
}

TEST(TokenizerFiles, CorruptFilesAreReported) {
  const fs::path tiny = kFixtures / "tokenizer" / "tiny";
  std::ifstream encoder_in(tiny / "encoder.json");
  std::string encoder((std::istreambuf_iterator<char>(encoder_in)), {});
  struct Case {
    std::string encoder, vocab, expect;
  } cases[] = {
      {"{\"a\": 0,", "#version: 0.2\n", "not JSON"},
      {"[1, 2]", "#version: 0.2\n", "JSON object"},
      {"{\"a\": 0, \"b\": 0}", "#version: 0.2\n", "tokens \"a\" and \"b\" both have the id 0"},
      {"{\"a\": 0, \"<|endoftext|>\": 1}", "#version: 0.2\n", "no token for byte"},
      {encoder, "a b\n", "#version"},
      {encoder, "#version: 0.2\nq z\n", "line 2 merges tokens missing"},
      {encoder, "#version: 0.2\na b c\n", "line 2 is not two"},
      {encoder, "#version: 0.2\n", "no merges"},
  };
  for (const auto& c : cases) {
    TokenizerScratch dir;
    dir.write("encoder.json", c.encoder);
    dir.write("vocab.bpe", c.vocab);
    auto message = error_of([&] { BpeTokenizer::load(dir.path); });
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
    EXPECT_EQ(message.find("fetch_data.sh"), std::string::npos) << message;
  }
}

// scripts/fetch_data.sh is advised only for the files it makes, never for a path of the user's.
TEST(TokenizerFiles, FetchAdviceOnlyForTheFetchedFiles) {
  using kintsugi::data::is_fetched_file;
  EXPECT_TRUE(is_fetched_file("data/brown/train.bin"));
  EXPECT_TRUE(is_fetched_file("/checkout/data/gpt2-tokenizer/encoder.json"));
  EXPECT_TRUE(is_fetched_file("/checkout/data/llama2-tokenizer"));
  EXPECT_FALSE(is_fetched_file("/tmp/mine/train.bin"));
  EXPECT_FALSE(is_fetched_file("/home/me/data/corpus.bin"));
  EXPECT_FALSE(is_fetched_file("/home/me/tokenizer"));
  const auto message = error_of([&] { BpeTokenizer::load(fs::path(KINTSUGI_DATA_DIR) / "gpt2-tokenizer-missing"); });
  EXPECT_NE(message.find("scripts/fetch_data.sh"), std::string::npos) << message;
}

namespace {

// Runs `kintsugi ARGS < stdin_file > out 2> err` and returns the exit status.
int run_cli(const std::string& args, const fs::path& in, const fs::path& out, const fs::path& err) {
  std::string command = std::string("'") + KINTSUGI_BINARY + "' " + args + " < '" + in.string() +
                        "' > '" + out.string() + "' 2> '" + err.string() + "'";
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST(TokenizerCli, EncodePrintsOneLineAndDecodeGivesExactBytes) {
  REQUIRE_GPT2(tok);
  TokenizerScratch dir;
  const std::string flag = "--tokenizer '" + kGpt2Dir.string() + "'";
  for (std::string text : {std::string("Hello world"), std::string("two lines\n\n  end \n"),
                           std::string(""), std::string("caf\xC3\xA9 \xF0\x9F\x98\x80\r\n")}) {
    dir.write("in.txt", text);
    ASSERT_EQ(run_cli("encode " + flag, dir.path / "in.txt", dir.path / "ids.txt", dir.path / "err"), 0)
        << slurp(dir.path / "err");
    std::string expected;
    for (auto id : tok.encode(text)) {
      if (!expected.empty()) expected += ' ';
      expected += std::to_string(id);
    }
    EXPECT_EQ(slurp(dir.path / "ids.txt"), expected + "\n");
    ASSERT_EQ(run_cli("decode " + flag, dir.path / "ids.txt", dir.path / "out.txt", dir.path / "err"), 0)
        << slurp(dir.path / "err");
    EXPECT_EQ(slurp(dir.path / "out.txt"), text);
  }
}

TEST(TokenizerCli, BadInputIsAClearError) {
  REQUIRE_GPT2(tok);
  (void)tok;  // the commands load the same files themselves
  TokenizerScratch dir;
  const std::string flag = "--tokenizer '" + kGpt2Dir.string() + "'";
  struct Case {
    std::string command, input, expect;
  } cases[] = {{"decode", "15496 50257", "token id 50257 (word 2) is out of range"},
               {"decode", "15496 x1", "\"x1\" (word 2) is not a token id"},
               {"decode", "-3", "out of range"},
               {"encode", "ok \xFF", "stdin: invalid UTF-8 at line 1 (byte offset 3"}};
  for (const auto& c : cases) {
    dir.write("in.txt", c.input);
    EXPECT_EQ(run_cli(c.command + " " + flag, dir.path / "in.txt", dir.path / "out", dir.path / "err"), 1);
    EXPECT_NE(slurp(dir.path / "err").find(c.expect), std::string::npos) << slurp(dir.path / "err");
  }
  EXPECT_EQ(run_cli("encode --tokenizer '" + dir.path.string() + "'", dir.path / "in.txt",
                    dir.path / "out", dir.path / "err"), 1);
  // The flag the path was given by, then what it lacks.
  EXPECT_NE(slurp(dir.path / "err").find("--tokenizer: tokenizer directory " + dir.path.string() +
                                         " holds neither"),
            std::string::npos)
      << slurp(dir.path / "err");
  EXPECT_EQ(slurp(dir.path / "err").find("fetch_data.sh"), std::string::npos);
}
