// Sliding-window attention (model.sliding_window, AttentionShape::window): query t sees keys
// t - W + 1..t only. The CPU kernels against the direct formula and finite differences (f64;
// with documents, grouped-query heads and ALiBi; windows shorter than a 32-row block and longer,
// so blocks wholly outside a window are skipped), a window of the whole sequence as none, decode
// against the forward's rows, a model's window reaching its kernels, and the planner's count of
// the pairs a window attends. (The 16-bit kernels: test_document_attention.cpp; models with a
// window: the llama_window cases of test_model_families.cpp and test_kv_cache.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"
#include "support/call_log.hpp"
#include "kintsugi/model/gpt.hpp"
#include "kintsugi/plan/attention_rate.hpp"
#include "kintsugi/plan/flops.hpp"
#include "support/random_tokens.hpp"

namespace kintsugi {
namespace {

using testing::random_vector;
using testing::view;

constexpr std::int64_t kSeq = 80;

// Document starts of two sequences of kSeq rows: one document, and documents ending after rows
// 10, 33 and 70 (documents longer than the windows, and one shorter).
std::vector<std::int32_t> two_sequences_of_documents() {
  std::vector<std::int32_t> out(kSeq, 0);
  std::int32_t start = 0;
  for (std::int64_t t = 0; t < kSeq; ++t) {
    out.push_back(start);
    if (t == 10 || t == 33 || t == 70) start = static_cast<std::int32_t>(t + 1);
  }
  return out;
}

struct WindowCase {
  std::int64_t window;
  bool documents, alibi;
};

class WindowKernels : public ::testing::TestWithParam<WindowCase> {};

// The window matters: without it the outputs differ.
TEST_P(WindowKernels, AttentionMatchesTheFormulaAndFiniteDifferences) {
  const WindowCase w = GetParam();
  const auto doc_start = two_sequences_of_documents();
  AttentionShape s{.batch = 2, .seq = kSeq, .heads = 4, .kv_heads = 2, .head_dim = 3};
  if (w.alibi) s.alibi_heads = 4;
  if (w.documents) s.doc_start = doc_start.data();
  const AttentionShape without = s;
  s.window = w.window;
  testing::expect_attention_matches_formula(s, without, 61, 1e-2, 400);
}

// Windows of 1 (each row itself only), 5 and 37 (inside a 32-row block, across one, not a
// multiple of it).
INSTANTIATE_TEST_SUITE_P(Windows, WindowKernels,
                         ::testing::Values(WindowCase{1, false, false}, WindowCase{5, false, true},
                                           WindowCase{37, false, false},
                                           WindowCase{5, true, false}, WindowCase{37, true, true}),
                         [](const auto& info) {
                           const WindowCase& w = info.param;
                           return "w" + std::to_string(w.window) + (w.documents ? "_docs" : "") +
                                  (w.alibi ? "_alibi" : "");
                         });

// A window as long as the sequence, or longer, is no window: the same bits.
TEST(WindowWhole, WindowOfTheWholeSequenceIsNone) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  AttentionShape s{.batch = 1, .seq = kSeq, .heads = 2, .kv_heads = 1, .head_dim = 4};
  const std::int64_t qkv_n = kSeq * 4 * 4, out_n = kSeq * 2 * 4, lse_n = 2 * kSeq;
  auto qkv = random_vector(qkv_n, 63), r = random_vector(out_n, 64);
  std::vector<std::vector<double>> runs;
  for (std::int64_t window : {0, 80, 1000}) {
    s.window = window;
    std::vector<double> out(out_n), lse(lse_n), dqkv(qkv_n);
    be->attention_forward(s, view(qkv, {qkv_n}), view(out, {out_n}), view(lse, {lse_n}));
    be->attention_backward(s, view(qkv, {qkv_n}), view(out, {out_n}), view(lse, {lse_n}),
                           view(r, {out_n}), view(dqkv, {qkv_n}));
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    runs.push_back(out);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// Decode with a window: row `position` of the forward's output, for positions inside the first
// window and past it (grouped-query heads, ALiBi).
TEST(WindowDecode, EqualsTheForwardRows) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  AttentionShape s{.batch = 2, .seq = 45, .heads = 4, .kv_heads = 2, .head_dim = 5,
                   .alibi_heads = 4};
  s.window = 7;
  const std::int64_t width = 8 * 5, d = 4 * 5;
  auto qkv = random_vector(2 * s.seq * width, 65);
  std::vector<double> out(2 * s.seq * d), lse(2 * 4 * s.seq);
  be->attention_forward(s, view(qkv, {2 * s.seq, width}), view(out, {2 * s.seq, d}),
                        view(lse, {2, 4, s.seq}));
  for (std::int64_t position : {0, 3, 6, 7, 30, 44}) {
    std::vector<double> got(2 * d);
    be->attention_decode(s, view(qkv, {2 * s.seq, width}), position, view(got, {2, d}));
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < d; ++i)
        ASSERT_NEAR(got[b * d + i], out[(b * s.seq + position) * d + i], 1e-13)
            << "position " << position;
  }
}

// A decode step with a window counts the keys it attends: min(position + 1, W) of them.
TEST(WindowDecode, CountsTheKeysItAttends) {
  MemoryTracker memory;
  auto cpu = make_cpu_backend(memory);
  testing::CallLog be(*cpu);
  AttentionShape s{.batch = 1, .seq = 20, .heads = 2, .kv_heads = 1, .head_dim = 4};
  const std::int64_t width = 4 * 4;
  auto qkv = random_vector(s.seq * width, 66);
  std::vector<double> got(2 * 4);
  for (std::int64_t window : {0, 5})
    for (std::int64_t position : {2, 12}) {
      s.window = window;
      be.calls.clear();
      be.attention_decode(s, view(qkv, {s.seq, width}), position, view(got, {1, 8}));
      ASSERT_EQ(be.calls.size(), 1u);
      const double keys = window > 0 ? std::min<std::int64_t>(position + 1, window) : position + 1;
      EXPECT_EQ(be.calls[0].flops, 4.0 * 2 * keys * 4) << window << " " << position;
      EXPECT_EQ(be.calls[0].bytes, 8.0 * ((keys * 2 + 2) * 4 + 2 * 4)) << window << " " << position;
    }
}

// llama-tiny with model.sliding_window = 16 over 40 rows: the same weights give another loss
// than without the window (its gradients and cached generation: the llama_window cases).
TEST(WindowModel, TheConfigsWindowReachesTheKernels) {
  ModelConfig c = model_preset("llama-tiny");
  c.vocab_size = 64, c.seq_len = 40, c.n_layer = 1, c.init_std = 0.3;
  const auto tokens = testing::random_tokens(c.seq_len, c.vocab_size, 5);
  const auto targets = testing::random_tokens(c.seq_len, c.vocab_size, 6);
  std::vector<double> losses;
  for (std::int64_t window : {0, 16}) {
    c.sliding_window = window;
    MemoryTracker memory;
    auto backend = make_cpu_backend(memory);
    GptModel model(*backend, c, DType::f64, 1, c.seq_len);
    model.params().initialize(3);
    losses.push_back(model.forward_loss(tokens.data(), targets.data()));
  }
  EXPECT_GT(std::abs(losses[0] - losses[1]), 1e-6);
}

// The pairs a window attends are sum over t of min(t + 1, W); the FLOP counts take them as
// keys per query scaled to the convention's full s x s, and a window of seq or more is none.
TEST(WindowFlops, CountsTheAttendedPairs) {
  for (std::int64_t seq : {1, 7, 128, 1000})
    for (std::int64_t window : {0, 1, 5, 16, 127, 128, 5000}) {
      double pairs = 0;
      for (std::int64_t t = 0; t < seq; ++t)
        pairs += static_cast<double>(window > 0 ? std::min(t + 1, window) : t + 1);
      EXPECT_EQ(attended_pairs(seq, window), pairs) << seq << " " << window;
      const double keys = attended_keys(seq, window);
      if (window <= 0 || window >= seq) EXPECT_EQ(keys, static_cast<double>(seq));
      else EXPECT_DOUBLE_EQ(keys, 2.0 * pairs / static_cast<double>(seq + 1));
    }
  EXPECT_EQ(attended_pairs(128, 16), 128.0 * 16 - 16.0 * 15 / 2);
  // A model's FLOPs with a window: its attention term is the attention core's count.
  ModelConfig m = model_preset("llama-tiny");
  const double rest = 6.0 * static_cast<double>(matmul_parameter_count(m));
  const double whole = model_flops_per_token(m, m.seq_len);
  m.sliding_window = 16;
  const double windowed = model_flops_per_token(m, m.seq_len);
  EXPECT_NEAR(windowed - rest,
              m.n_layer * attention_core_flops(1, m.seq_len, m.n_head, m.head_dim(), 16) /
                  m.seq_len,
              1e-12 * rest);
  EXPECT_LT(windowed, whole);
  EXPECT_EQ(attention_core_flops(2, 64, 4, 8, 0), attention_core_flops(2, 64, 4, 8, 64));
  // The measured rate's shape carries the window (and its cache key names it).
  const AttentionShape s = attention_shape_of(m, 2);
  EXPECT_EQ(s.window, 16);
  EXPECT_NE(describe(s, DType::bf16).find(" w16"), std::string::npos);
}

}  // namespace
}  // namespace kintsugi
