// Generation with a key/value cache: the decode attention kernel against the training kernel's
// rows (grouped-query heads, ALiBi, f64/f32 and 16-bit caches), RoPE of one row at an offset
// against the same row of the whole sequence, and whole models (GPT-2, Llama, BLOOM, Llama with
// a sliding window) whose cached logits equal those of rerunning the window at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck.hpp"
#include "support/family_variants.hpp"
#include "kintsugi/backend/backend.hpp"
#include "kintsugi/core/rng.hpp"
#include "kintsugi/model/gpt.hpp"
#include "mixed_precision_fixture.hpp"

namespace kintsugi {
namespace {

using testing::random_vector;
using testing::view;

const AttentionShape kShapes[] = {
    {.batch = 2, .seq = 9, .heads = 4, .kv_heads = 4, .head_dim = 5},
    {.batch = 1, .seq = 40, .heads = 6, .kv_heads = 2, .head_dim = 8},  // grouped query
    {.batch = 2, .seq = 37, .heads = 2, .kv_heads = 2, .head_dim = 3,   // ALiBi, heads 2-3 of 4
     .alibi_heads = 4, .head_begin = 2}};

std::int64_t width(const AttentionShape& s) { return (s.heads + 2 * s.kv_heads) * s.head_dim; }

// Row `position` of every sequence of attention_forward's output, as [B, H, hd].
template <class T>
std::vector<T> forward_rows(Backend& be, const AttentionShape& s, std::vector<T>& qkv,
                            std::int64_t position) {
  const std::int64_t d = s.heads * s.head_dim;
  std::vector<T> out(s.batch * s.seq * d), lse(s.batch * s.heads * s.seq), rows;
  const DType t = sizeof(T) == 8 ? DType::f64 : DType::f32;
  be.attention_forward(s, Tensor{qkv.data(), t, {s.batch * s.seq, width(s)}},
                       Tensor{out.data(), t, {s.batch * s.seq, d}},
                       Tensor{lse.data(), t, {s.batch, s.heads, s.seq}});
  for (std::int64_t b = 0; b < s.batch; ++b)
    rows.insert(rows.end(), out.begin() + (b * s.seq + position) * d,
                out.begin() + (b * s.seq + position + 1) * d);
  return rows;
}

template <class T>
void expect_decode_matches_forward(double tolerance) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  const DType t = sizeof(T) == 8 ? DType::f64 : DType::f32;
  for (const AttentionShape& s : kShapes) {
    const auto values = random_vector(s.batch * s.seq * width(s), 3);
    std::vector<T> qkv(values.begin(), values.end());
    for (std::int64_t position : {std::int64_t{0}, std::int64_t{1}, s.seq / 2, s.seq - 1}) {
      const auto want = forward_rows(*be, s, qkv, position);
      // Rows after `position` hold garbage: the kernel must not read them.
      std::vector<T> cache = qkv;
      for (std::int64_t b = 0; b < s.batch; ++b)
        for (std::int64_t i = (b * s.seq + position + 1) * width(s); i < (b + 1) * s.seq * width(s); ++i)
          cache[i] = T(1e6);
      std::vector<T> got(want.size(), T(NAN));
      be->attention_decode(s, Tensor{cache.data(), t, {s.batch * s.seq, width(s)}}, position,
                           Tensor{got.data(), t, {s.batch, s.heads * s.head_dim}});
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tolerance) << "position " << position << " element " << i;
    }
  }
}

TEST(KvCache, DecodeAttentionEqualsTheForwardRowF64) { expect_decode_matches_forward<double>(1e-13); }
TEST(KvCache, DecodeAttentionEqualsTheForwardRowF32) { expect_decode_matches_forward<float>(2e-6); }

// 16-bit caches (bf16 and f16 generation) against the f32 kernel, at the fixture's tolerance.
class KvCacheMixed : public mixed_test::MixedPrecision {};

TEST_F(KvCacheMixed, DecodeAttentionMatchesF32) {
  using namespace mixed_test;
  for (const AttentionShape& s : kShapes) {
    const std::int64_t cache_n = s.batch * s.seq * width(s), out_n = s.batch * s.heads * s.head_dim;
    const std::vector<Arg> args{{{s.batch * s.seq, width(s)}, random_values(cache_n, 40)},
                                {{s.batch, s.heads * s.head_dim}, random_values(out_n, 41)}};
    for (std::int64_t position : {std::int64_t{0}, s.seq - 1}) {
      const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
        b.attention_decode(s, t[0], position, t[1]);
      };
      const std::string what = "attention decode at " + std::to_string(position);
      for (DType dt : {bf16, f16}) compare(what, args, {dt, dt}, {1}, op);
      compare(what, args, {bf16, f32}, {1}, op);
    }
  }
}

// RoPE of rows [p, p + n) given first_position = p equals those rows of the whole sequence.
TEST(KvCache, RopeAtAnOffsetEqualsTheSameRows) {
  MemoryTracker memory;
  auto be = make_cpu_backend(memory);
  const AttentionShape whole{.batch = 1, .seq = 12, .heads = 4, .kv_heads = 2, .head_dim = 6};
  auto qkv = random_vector(whole.seq * width(whole), 5);
  auto rotated = qkv;
  be->rope(whole, view(rotated, {whole.seq, width(whole)}), 10.0, false);
  for (std::int64_t p : {0, 1, 7, 11}) {
    const std::int64_t n = std::min<std::int64_t>(2, whole.seq - p);
    AttentionShape part = whole;
    part.seq = n;
    part.first_position = p;
    std::vector<double> rows(qkv.begin() + p * width(whole), qkv.begin() + (p + n) * width(whole));
    be->rope(part, view(rows, {n, width(whole)}), 10.0, false);
    for (std::int64_t i = 0; i < n * width(whole); ++i)
      ASSERT_NEAR(rows[i], rotated[p * width(whole) + i], 1e-14) << "row " << p << " index " << i;
  }
}

// A family or variant (support/family_variants.hpp) over 10 rows.
ModelConfig kv_cache_model(const std::string& param) {
  ModelConfig c = testing::family_variant(param);
  c.name = "kv-" + param;
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 4;
  c.n_kv_head = c.is_llama() ? 2 : 0;
  c.d_ff = c.is_llama() ? 24 : 32;
  c.vocab_size = 50;
  c.seq_len = 10;
  c.init_std = 0.3;  // large weights: every layer moves the logits
  c.rope_theta = 10.0;
  return c;
}

class KvCacheModel : public ::testing::TestWithParam<std::string> {};

// Run a prompt, then add one token at a time: every position's logits equal those of rerunning
// the whole window up to it.
TEST_P(KvCacheModel, CachedLogitsEqualRerunningTheWindow) {
  const ModelConfig c = kv_cache_model(GetParam());
  const std::int64_t T = c.seq_len;
  std::vector<std::int32_t> tokens(T);
  for (std::int64_t i = 0; i < T; ++i)
    tokens[i] = static_cast<std::int32_t>(uniform_int_at(9, 0, i, c.vocab_size));
  for (DType dtype : {DType::f64, DType::f32}) {
    MemoryTracker memory;
    auto backend = make_cpu_backend(memory);
    GptModel model(*backend, c, dtype, 1, T);
    model.params().initialize(17);
    std::vector<std::vector<float>> want(T, std::vector<float>(c.vocab_size));
    for (std::int64_t p = 0; p < T; ++p) model.next_token_logits(tokens.data(), p, want[p].data());
    const double tolerance = dtype == DType::f64 ? 1e-6 : 2e-4;  // logits are read as f32
    // A prompt of start + 1 tokens, run as a prompt or by a whole-window forward (whose rows
    // after the prompt are overwritten as tokens are added), then one token at a time.
    for (const auto& [start, whole_window] : {std::pair<std::int64_t, bool>{0, false}, {3, false},
                                              {T - 1, false}, {2, true}}) {
      std::vector<float> got(c.vocab_size);
      std::vector<std::int32_t> prefix(T, 0);
      std::copy(tokens.begin(), tokens.begin() + start + 1, prefix.begin());
      if (whole_window) {
        model.next_token_logits(prefix.data(), start, got.data());
      } else {
        model.prefill_logits(prefix.data(), start + 1, got.data());
      }
      for (std::int64_t v = 0; v < c.vocab_size; ++v)
        ASSERT_NEAR(got[v], want[start][v], tolerance) << "prompt of " << start + 1 << " id " << v;
      for (std::int64_t p = start + 1; p < T; ++p) {
        model.decode_logits(tokens[p], p, got.data());
        double spread = 0;
        for (std::int64_t v = 0; v < c.vocab_size; ++v) {
          ASSERT_NEAR(got[v], want[p][v], tolerance)
              << name_of(dtype) << " prompt " << start + 1 << " position " << p << " id " << v;
          spread = std::max(spread, std::abs(double(want[p][v]) - want[p][0]));
        }
        EXPECT_GT(spread, 1e-2);  // the logits say something
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KvCacheModel,
                         ::testing::ValuesIn(testing::kFamilyVariants),
                         [](const auto& info) { return info.param; });
// Mixtures of experts (docs/moe.md): the MoE half runs on the added rows alone (dropless).
INSTANTIATE_TEST_SUITE_P(Moe, KvCacheModel, ::testing::Values("llama_moe", "qwen2_moe"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kintsugi
