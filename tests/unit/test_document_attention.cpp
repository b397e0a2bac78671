// Document attention (data.document_attention): a query sees only the keys of its own document
// and positions restart at each document. The attention kernels against a direct formula and
// finite differences (f64), the mixed-precision kernels against the f32 ones, RoPE against
// rotating each document on its own, and whole models of every family against a reference
// that runs each document as a sequence of its own: the packed window's loss and gradients are
// the documents' sums.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/model/gpt.hpp"
#include "mixed_precision_fixture.hpp"

namespace kintsugi {
namespace {

using testing::random_vector;
using testing::view;

// Ends inside the first 32-row block and across blocks, at row 0 and at the last row.
const std::vector<std::vector<int>> kEnds = {{0, 5, 33, 39}, {17, 18, 36}};

class DocumentKernels : public ::testing::TestWithParam<bool> {};  // ALiBi or not

TEST_P(DocumentKernels, AttentionMatchesTheFormulaAndFiniteDifferences) {
  const auto doc_start = testing::document_starts(40, kEnds);
  AttentionShape s{.batch = 2, .seq = 40, .heads = 4, .kv_heads = 2, .head_dim = 3};
  if (GetParam()) s.alibi_heads = 4;
  s.doc_start = doc_start.data();
  // The documents matter: one document per sequence gives other outputs.
  AttentionShape whole = s;
  whole.doc_start = nullptr;
  testing::expect_attention_matches_formula(s, whole, 21, 1e-2, 300);
}

INSTANTIATE_TEST_SUITE_P(Alibi, DocumentKernels, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "alibi" : "plain"; });

// RoPE with documents rotates each row by its position within its document.
TEST(DocumentRope, RotatesEachDocumentFromPositionZero) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  const auto doc_start = testing::document_starts(40, kEnds);
  AttentionShape s{.batch = 2, .seq = 40, .heads = 4, .kv_heads = 2, .head_dim = 6};
  s.doc_start = doc_start.data();
  const std::int64_t width = 8 * 6;
  auto qkv = random_vector(2 * 40 * width, 23);
  auto rotated = qkv;
  be->rope(s, view(rotated, {80, width}), 10.0, false);
  for (std::int64_t r = 0; r < 80; ++r) {
    // Row r alone, rotated at its position within its document.
    AttentionShape one{.batch = 1, .seq = 1, .heads = 4, .kv_heads = 2, .head_dim = 6};
    one.first_position = r % 40 - doc_start[r];
    std::vector<double> row(qkv.begin() + r * width, qkv.begin() + (r + 1) * width);
    be->rope(one, view(row, {1, width}), 10.0, false);
    for (std::int64_t i = 0; i < width; ++i)
      ASSERT_NEAR(rotated[r * width + i], row[i], 1e-14) << "row " << r;
  }
}

// bf16 and f16 attention with documents against the f32 kernels, also with a sliding window
// (AttentionShape::window) of 9: the 16-bit kernels mask the keys outside it, the f32 ones skip
// them from row 32 on.
class DocumentMixed : public mixed_test::MixedPrecision,
                      public ::testing::WithParamInterface<std::int64_t> {};

TEST_P(DocumentMixed, AttentionMatchesF32) {
  using namespace mixed_test;
  const auto doc_start = testing::document_starts(40, kEnds);
  AttentionShape s{.batch = 2, .seq = 40, .heads = 2, .kv_heads = 2, .head_dim = 8};
  s.doc_start = doc_start.data();
  s.window = GetParam();
  const std::int64_t qkv_n = 2 * 40 * 6 * 8, out_n = 2 * 40 * 2 * 8, lse_n = 2 * 2 * 40;
  const std::vector<Arg> args{{{qkv_n}, random_values(qkv_n, 50)},
                              {{out_n}, random_values(out_n, 51)},
                              {{lse_n}, random_values(lse_n, 52)},
                              {{out_n}, random_values(out_n, 53)},
                              {{qkv_n}, random_values(qkv_n, 54)}};
  const Op both = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
    b.attention_forward(s, t[0], t[1], t[2]);
    b.attention_backward(s, t[0], t[1], t[2], t[3], t[4]);
  };
  for (DType t : {bf16, f16})
    compare("document attention", args, {t, t, f32, t, t}, {1, 2, 4}, both, 2.0);
}

INSTANTIATE_TEST_SUITE_P(Window, DocumentMixed, ::testing::Values(0, 9),
                         [](const auto& info) { return "w" + std::to_string(info.param); });

ModelConfig document_attention_model(const std::string& family) {
  ModelConfig c;
  c.name = "docs-" + family;
  c.family = parse_name<Family>(family, "family");
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 4;
  c.n_kv_head = c.is_llama() ? 2 : 0;
  c.d_ff = c.is_llama() ? 24 : 32;
  if (c.qk_norm()) c.head_size = 6;  // Qwen3: q_norm and k_norm, heads apart from 16 / 4
  c.vocab_size = 30;
  c.seq_len = 12;
  c.init_std = 0.2;
  c.rope_theta = 10.0;
  return c;
}

class DocumentModel : public ::testing::TestWithParam<std::string> {};

// Two sequences of 12 tokens packing documents that end with id 0 (at rows 3 and 7 of the
// first, 0 and 11 of the second): loss and every gradient equal those of running each
// document as a sequence of its own, and differ from attending across the documents.
TEST_P(DocumentModel, PackedWindowEqualsEachDocumentAlone) {
  const ModelConfig c = document_attention_model(GetParam());
  const std::int64_t B = 2, T = 12;
  constexpr std::int32_t kEnd = 0;
  std::vector<std::int32_t> tokens(B * T), targets(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) {
    tokens[i] = 1 + static_cast<std::int32_t>(uniform_int_at(5, 0, i, c.vocab_size - 1));
    targets[i] = static_cast<std::int32_t>(uniform_int_at(6, 0, i, c.vocab_size));
  }
  for (std::int64_t r : {3, 7, 12, 23}) tokens[r] = kEnd;

  MemoryTracker memory;
  auto backend = make_cpu_backend(memory);
  auto run = [&](GptModel& model, const std::int32_t* tok, const std::int32_t* tgt) {
    model.params().initialize(31);
    model.params().begin_step();
    const double loss = model.forward_backward(tok, tgt, 1.0);
    const Tensor g = model.params().grads();
    return std::pair{loss, std::vector<double>(g.as<double>(), g.as<double>() + g.numel())};
  };
  GptModel packed(*backend, c, DType::f64, B, T, 1, {}, Recompute::none, kEnd);
  const auto [loss, grads] = run(packed, tokens.data(), targets.data());

  double want_loss = 0;
  std::vector<double> want_grads(grads.size(), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t start = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      if (tokens[b * T + t] != kEnd && t != T - 1) continue;
      const std::int64_t n = t + 1 - start, at = b * T + start;
      GptModel alone(*backend, c, DType::f64, 1, n);
      const auto [l, g] = run(alone, tokens.data() + at, targets.data() + at);
      want_loss += l;
      for (std::size_t i = 0; i < g.size(); ++i) want_grads[i] += g[i];
      start = t + 1;
    }
  }
  EXPECT_NEAR(loss, want_loss, 1e-10 * std::abs(want_loss));
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    scale = std::max(scale, std::abs(want_grads[i]));
    worst = std::max(worst, std::abs(grads[i] - want_grads[i]));
  }
  EXPECT_LE(worst, 1e-10 * scale);

  GptModel across(*backend, c, DType::f64, B, T);
  EXPECT_GT(std::abs(run(across, tokens.data(), targets.data()).first - want_loss), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, DocumentModel, ::testing::Values("gpt2", "llama", "bloom", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kintsugi
