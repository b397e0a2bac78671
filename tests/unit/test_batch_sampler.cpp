// Batch sampler: batches are pure functions of (seed, step, sequence), so any slice of a global
// batch equals the same rows of the whole batch; evaluation windows are fixed and even.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <numeric>
#include <random>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/data/batch_sampler.hpp"

namespace fs = std::filesystem;
using namespace kintsugi::data;
using Tokens = std::vector<std::int32_t>;

namespace {

// A file whose token at position p is p % vocab, so a window's start can be read off its
// first token.
struct Corpus {
  fs::path dir = fs::temp_directory_path() /
                 ("kintsugi_sampler_test_" + std::to_string(std::random_device{}()));
  fs::path path = dir / "tokens.bin";
  explicit Corpus(std::int64_t count, std::int32_t vocab = 1 << 20) {
    Tokens tokens(count);
    for (std::int64_t i = 0; i < count; ++i) tokens[i] = static_cast<std::int32_t>(i % vocab);
    write_token_file(path, vocab, tokens);
  }
  ~Corpus() { fs::remove_all(dir); }
  BatchSampler sampler(std::int64_t seq_len, std::uint64_t seed) const {
    return BatchSampler(TokenFile::open(path), seq_len, seed);
  }
};

struct Batch {
  Tokens inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch sample(const BatchSampler& s, std::int64_t step, std::int64_t first, std::int64_t count) {
  Batch b{Tokens(count * s.seq_len()), Tokens(count * s.seq_len())};
  s.sample(step, first, count, b.inputs.data(), b.targets.data());
  return b;
}

}  // namespace

TEST(BatchSampler, FollowsTheDocumentedDefinition) {
  Corpus corpus(10000);
  auto s = corpus.sampler(16, 1234);
  const std::uint64_t stream = kintsugi::stream_of("train-batches");
  for (std::int64_t step : {0, 1, 77}) {
    auto b = sample(s, step, 0, 8);
    for (std::int64_t i = 0; i < 8; ++i) {
      auto start = static_cast<std::int32_t>(kintsugi::uniform_int_at(1234, stream + step, i, 10000 - 16));
      EXPECT_EQ(s.train_start(step, i), start);
      for (std::int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(b.inputs[i * 16 + t], start + t);
        EXPECT_EQ(b.targets[i * 16 + t], start + t + 1);  // targets are inputs shifted by one
      }
    }
  }
}

TEST(BatchSampler, IsDeterministicAcrossInstances) {
  Corpus corpus(5000);
  EXPECT_EQ(sample(corpus.sampler(32, 9), 3, 0, 16), sample(corpus.sampler(32, 9), 3, 0, 16));
}

TEST(BatchSampler, SlicesOfAGlobalBatchAreItsRows) {
  Corpus corpus(5000);
  auto s = corpus.sampler(32, 9);
  auto whole = sample(s, 5, 0, 8);
  auto a = sample(s, 5, 0, 4), b = sample(s, 5, 4, 4);
  a.inputs.insert(a.inputs.end(), b.inputs.begin(), b.inputs.end());
  a.targets.insert(a.targets.end(), b.targets.begin(), b.targets.end());
  EXPECT_EQ(a, whole);
  // Any single row too, as a rank holding one sequence would draw it.
  auto row = sample(s, 5, 6, 1);
  EXPECT_TRUE(std::equal(row.inputs.begin(), row.inputs.end(), whole.inputs.begin() + 6 * 32));
}

TEST(BatchSampler, StepsAndSeedsGiveDifferentBatches) {
  Corpus corpus(100000);
  auto s = corpus.sampler(8, 1);
  EXPECT_NE(sample(s, 0, 0, 8), sample(s, 1, 0, 8));
  EXPECT_NE(sample(s, 0, 0, 8), sample(corpus.sampler(8, 2), 0, 0, 8));
  // Sequences within one batch differ as well.
  auto b = sample(s, 0, 0, 2);
  EXPECT_FALSE(std::equal(b.inputs.begin(), b.inputs.begin() + 8, b.inputs.begin() + 8));
}

TEST(BatchSampler, StartsCoverTheWholeFileAndStayInside) {
  Corpus corpus(1000);
  auto s = corpus.sampler(100, 5);
  std::int64_t lo = 1000, hi = -1;
  for (std::int64_t step = 0; step < 200; ++step)
    for (std::int64_t i = 0; i < 16; ++i) {
      auto start = s.train_start(step, i);
      lo = std::min(lo, start);
      hi = std::max(hi, start);
    }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 1000 - 100 - 1);  // the last start whose final target is the last token
}

TEST(BatchSampler, SmallestFileWorksAndShorterOnesAreRejected) {
  Corpus exact(17);
  auto s = exact.sampler(16, 0);
  auto b = sample(s, 3, 0, 2);
  EXPECT_EQ(b.inputs[0], 0);
  EXPECT_EQ(b.targets[15], 16);

  Corpus too_short(16);
  try {
    too_short.sampler(16, 0);
    FAIL() << "expected an error";
  } catch (const kintsugi::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("16 tokens"), std::string::npos) << message;
    EXPECT_NE(message.find(too_short.path.string()), std::string::npos) << message;
  }
}

TEST(BatchSampler, EvalWindowsAreEvenFixedAndSeedIndependent) {
  Corpus corpus(1001);
  auto a = corpus.sampler(10, 1), b = corpus.sampler(10, 2);
  EXPECT_EQ(a.max_disjoint_eval_windows(), 100);
  const std::int64_t windows = 100;
  Tokens in(10), out(10), in2(10), out2(10);
  for (std::int64_t w = 0; w < windows; ++w) {
    a.eval_window(w, windows, in.data(), out.data());
    b.eval_window(w, windows, in2.data(), out2.data());
    EXPECT_EQ(in, in2);
    EXPECT_EQ(out, out2);
    EXPECT_EQ(in[0], a.eval_start(w, windows));
    EXPECT_EQ(out[9], in[0] + 10);
    // 100 windows of 10 over 1001 tokens tile the file exactly: no token predicted twice.
    EXPECT_EQ(a.eval_start(w, windows), w * 10);
  }
  EXPECT_EQ(a.eval_start(0, 1), 0);
  EXPECT_EQ(a.eval_start(2, 3), 1001 - 10 - 1);  // the last window ends at the last token
  EXPECT_EQ(a.eval_start(1, 3), (1001 - 10 - 1) / 2);
}

namespace {

// Two datasets told apart by their ids: dataset k's token at position p is k * 1000000 + p.
struct Blend {
  fs::path dir = fs::temp_directory_path() /
                 ("kintsugi_blend_test_" + std::to_string(std::random_device{}()));
  Blend() {
    fs::create_directories(dir);
    for (int k = 0; k < 2; ++k) {
      Tokens tokens(k == 0 ? 5000 : 800);
      for (std::size_t p = 0; p < tokens.size(); ++p)
        tokens[p] = static_cast<std::int32_t>(k * 1000000 + p);
      write_token_file(dir / (std::to_string(k) + ".bin"), 2000000, tokens);
    }
  }
  ~Blend() { fs::remove_all(dir); }
  BatchSampler sampler(double w0, double w1, std::int64_t seq_len = 16) const {
    std::vector<BatchSampler::Source> sources;
    sources.push_back({std::make_shared<TokenFile>(TokenFile::open(dir / "0.bin")), w0});
    sources.push_back({std::make_shared<TokenFile>(TokenFile::open(dir / "1.bin")), w1});
    return BatchSampler(std::move(sources), seq_len, 42);
  }
};

}  // namespace

TEST(BatchSampler, BlendFollowsTheDocumentedDefinition) {
  Blend blend;
  auto s = blend.sampler(3, 1);  // normalized: 0.75, 0.25
  const std::uint64_t pick = kintsugi::stream_of("train-blend");
  const std::uint64_t start_stream = kintsugi::stream_of("train-batches");
  std::array<std::int64_t, 2> count{};
  for (std::int64_t step = 0; step < 500; ++step)
    for (std::int64_t i = 0; i < 16; ++i) {
      const std::size_t k = kintsugi::uniform_at(42, pick + step, i) < 0.75 ? 0 : 1;
      ASSERT_EQ(s.source_of(step, i), k);
      const std::int64_t size = k == 0 ? 5000 : 800;
      const auto start = static_cast<std::int64_t>(
          kintsugi::uniform_int_at(42, start_stream + step, i, size - 16));
      ASSERT_EQ(s.train_start(step, i), start);
      auto b = sample(s, step, i, 1);
      ASSERT_EQ(b.inputs[0], static_cast<std::int32_t>(k * 1000000 + start));
      ASSERT_EQ(b.targets[15], static_cast<std::int32_t>(k * 1000000 + start + 16));
      ++count[k];
    }
  // 8000 draws: the share of dataset 0 is 0.75 within a few standard deviations (0.005).
  EXPECT_NEAR(static_cast<double>(count[0]) / 8000, 0.75, 0.02);
  // Slices of a blended global batch are its rows, as data-parallel ranks draw them.
  auto whole = sample(s, 7, 0, 8), half = sample(s, 7, 4, 4);
  EXPECT_TRUE(std::equal(half.inputs.begin(), half.inputs.end(), whole.inputs.begin() + 4 * 16));
}

TEST(BatchSampler, BlendEvaluationVisitsEveryDatasetEvenly) {
  Blend blend;
  auto s = blend.sampler(1, 9);  // weights do not matter for evaluation
  Tokens in(16), out(16);
  const std::int64_t windows = 6;  // three windows in each dataset
  for (std::int64_t w = 0; w < windows; ++w) {
    s.eval_window(w, windows, in.data(), out.data());
    EXPECT_EQ(s.eval_source(w), static_cast<std::size_t>(w % 2));
    const std::int64_t size = w % 2 == 0 ? 5000 : 800, j = w / 2;
    EXPECT_EQ(in[0], static_cast<std::int32_t>((w % 2) * 1000000 + j * (size - 17) / 2));
  }
  EXPECT_THROW(blend.sampler(1, 0), kintsugi::Error);  // weights must be positive
}
