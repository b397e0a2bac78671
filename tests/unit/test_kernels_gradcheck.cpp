// Every op's backward against central finite differences, in float64 (the same kernels that
// train in float32).
#include <gtest/gtest.h>

#include "gradcheck.hpp"
#include "kintsugi/backend/backend.hpp"
#include "op_helpers.hpp"
#include "support/attention_case.hpp"

namespace kintsugi {
namespace {

using testing::AttentionCase;
using testing::attention_case_name;
using testing::cross_entropy_rows;
using testing::dot;
using testing::ids;
using testing::expect_gradient;
using testing::random_vector;
using testing::view;

class KernelGradients : public ::testing::Test {
 protected:
  MemoryTracker memory;
  std::unique_ptr<Backend> be = make_cpu_backend(memory);
};

TEST_F(KernelGradients, Linear) {
  const std::int64_t m = 5, k = 7, n = 3;
  auto x = random_vector(m * k, 1), w = random_vector(n * k, 2), b = random_vector(n, 3);
  auto r = random_vector(m * n, 4);  // loss = <y, r>
  std::vector<double> y(m * n);
  auto loss = [&] {
    Tensor bt = view(b, {n});
    be->linear_forward(view(x, {m, k}), view(w, {n, k}), &bt, view(y, {m, n}));
    return dot(y.data(), r.data(), m * n);
  };
  std::vector<double> dx(m * k), dw(n * k), db(n);
  Tensor dbt = view(db, {n});
  be->linear_backward_input(view(r, {m, n}), view(w, {n, k}), view(dx, {m, k}), false);
  be->linear_backward_weight(view(r, {m, n}), view(x, {m, k}), view(dw, {n, k}), &dbt, false);
  expect_gradient(loss, x.data(), m * k, dx.data(), "dx");
  expect_gradient(loss, w.data(), n * k, dw.data(), "dw");
  expect_gradient(loss, b.data(), n, db.data(), "db");

  // accumulate adds to what is there
  std::vector<double> dw2 = dw;
  be->linear_backward_weight(view(r, {m, n}), view(x, {m, k}), view(dw2, {n, k}), &dbt, true);
  for (std::int64_t i = 0; i < n * k; ++i) EXPECT_NEAR(dw2[i], 2 * dw[i], 1e-12);
}

TEST_F(KernelGradients, LayerNorm) {
  const std::int64_t rows = 4, cols = 9;
  auto x = random_vector(rows * cols, 5, 2.0), w = random_vector(cols, 6),
       b = random_vector(cols, 7), r = random_vector(rows * cols, 8);
  std::vector<double> y(rows * cols), mean(rows), rstd(rows);
  auto loss = [&] {
    be->layernorm_forward(view(x, {rows, cols}), view(w, {cols}), view(b, {cols}),
                          view(y, {rows, cols}), view(mean, {rows}), view(rstd, {rows}), 1e-5);
    return dot(y.data(), r.data(), rows * cols);
  };
  loss();
  std::vector<double> dx(rows * cols, 0.0), dw(cols), db(cols);
  be->layernorm_backward(view(r, {rows, cols}), view(x, {rows, cols}), view(w, {cols}),
                         view(mean, {rows}), view(rstd, {rows}), view(dx, {rows, cols}),
                         view(dw, {cols}), view(db, {cols}), false);
  expect_gradient(loss, x.data(), rows * cols, dx.data(), "dx");
  expect_gradient(loss, w.data(), cols, dw.data(), "dw");
  expect_gradient(loss, b.data(), cols, db.data(), "db");
}

TEST_F(KernelGradients, Gelu) {
  const std::int64_t n = 50;
  auto x = random_vector(n, 9, 3.0), r = random_vector(n, 10);
  std::vector<double> y(n), dx(n);
  auto loss = [&] {
    be->gelu_forward(view(x, {n}), view(y, {n}));
    return dot(y.data(), r.data(), n);
  };
  be->gelu_backward(view(x, {n}), view(r, {n}), view(dx, {n}));
  expect_gradient(loss, x.data(), n, dx.data(), "dx");
}

class AttentionGradients : public KernelGradients,
                           public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionGradients, MatchFiniteDifferences) {
  const auto c = GetParam();
  AttentionShape s{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim};
  const std::int64_t qkv_n = c.batch * c.seq * (c.heads + 2 * c.kv_heads) * c.head_dim;
  const std::int64_t out_n = c.batch * c.seq * c.heads * c.head_dim;
  auto qkv = random_vector(qkv_n, 11), r = random_vector(out_n, 12);
  std::vector<double> out(out_n), lse(c.batch * c.heads * c.seq), dqkv(qkv_n);
  auto loss = [&] {
    be->attention_forward(s, view(qkv, {qkv_n}), view(out, {out_n}),
                          view(lse, {c.batch * c.heads * c.seq}));
    return dot(out.data(), r.data(), out_n);
  };
  loss();
  be->attention_backward(s, view(qkv, {qkv_n}), view(out, {out_n}),
                         view(lse, {c.batch * c.heads * c.seq}), view(r, {out_n}),
                         view(dqkv, {qkv_n}));
  expect_gradient(loss, qkv.data(), qkv_n, dqkv.data(), "dqkv", 200);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGradients,
                         ::testing::Values(AttentionCase{2, 5, 2, 2, 4},
                                           // crosses the 64-row query blocks
                                           AttentionCase{1, 70, 1, 1, 3},
                                           // grouped-query: 4 query heads share 2 kv heads
                                           AttentionCase{2, 9, 4, 2, 3}),
                         [](const auto& info) { return attention_case_name(info.param); });

TEST_F(KernelGradients, AttentionIsCausal) {
  // Changing a later token must not change earlier outputs.
  AttentionShape s{1, 6, 2, 2, 4};
  const std::int64_t qkv_n = 6 * 6 * 4, out_n = 6 * 2 * 4;
  auto qkv = random_vector(qkv_n, 13);
  std::vector<double> out1(out_n), out2(out_n), lse(12);
  be->attention_forward(s, view(qkv, {qkv_n}), view(out1, {out_n}), view(lse, {12}));
  for (std::int64_t i = 5 * 24; i < 6 * 24; ++i) qkv[i] += 1.0;  // last token's q, k, v
  be->attention_forward(s, view(qkv, {qkv_n}), view(out2, {out_n}), view(lse, {12}));
  for (std::int64_t i = 0; i < 5 * 8; ++i) EXPECT_DOUBLE_EQ(out1[i], out2[i]);
  EXPECT_NE(out1[5 * 8], out2[5 * 8]);
}

TEST_F(KernelGradients, Embedding) {
  const std::int64_t vocab = 6, seq = 3, batch = 2, dim = 4;
  std::vector<std::int32_t> tokens = {1, 5, 1, 0, 2, 5};
  auto wte = random_vector(vocab * dim, 14), wpe = random_vector(seq * dim, 15),
       r = random_vector(batch * seq * dim, 16);
  std::vector<double> out(batch * seq * dim), dwte(vocab * dim, 7.0), dwpe(seq * dim, 7.0);
  auto loss = [&] {
    be->embedding_forward(ids(tokens), view(wte, {vocab, dim}), view(out, {batch * seq, dim}));
    be->position_embedding_forward(view(out, {batch * seq, dim}), view(wpe, {seq, dim}), seq);
    return dot(out.data(), r.data(), batch * seq * dim);
  };
  be->embedding_backward(ids(tokens), view(r, {batch * seq, dim}), view(dwte, {vocab, dim}),
                         false);
  be->position_embedding_backward(view(r, {batch * seq, dim}), view(dwpe, {seq, dim}), seq, false);
  expect_gradient(loss, wte.data(), vocab * dim, dwte.data(), "dwte");
  expect_gradient(loss, wpe.data(), seq * dim, dwpe.data(), "dwpe");
}

TEST_F(KernelGradients, EmbeddingShardSeesOnlyItsIds) {
  // Rows [3, 6) of a 6-row table: ids 0..2 give zero rows and no gradient.
  const std::int64_t dim = 2;
  std::vector<std::int32_t> tokens = {4, 1};
  std::vector<double> shard = {1, 2, 3, 4, 5, 6}, out(4), grad(6);
  be->embedding_forward(ids(tokens), view(shard, {3, dim}), view(out, {2, dim}), 3);
  EXPECT_EQ(out, (std::vector<double>{3, 4, 0, 0}));
  std::vector<double> d = {1, 1, 1, 1};
  be->embedding_backward(ids(tokens), view(d, {2, dim}), view(grad, {3, dim}), false, 3);
  EXPECT_EQ(grad, (std::vector<double>{0, 0, 1, 1, 0, 0}));
}

TEST_F(KernelGradients, CrossEntropyWithPaddingAndIgnoredTargets) {
  const std::int64_t rows = 3, vocab = 5, padded = 8;
  std::vector<std::int32_t> targets = {4, -1, 0};
  auto logits = random_vector(rows * padded, 17, 2.0);
  const double scale = 0.37;
  auto run = [&](std::vector<double>& l, std::vector<double>& losses, bool backward) {
    std::vector<double> mx(rows), sum(rows), tl(rows);
    be->softmax_row_max(view(l, {rows, padded}), vocab, view(mx, {rows}));
    be->softmax_row_sum(view(l, {rows, padded}), vocab, view(mx, {rows}), ids(targets), 0,
                        view(sum, {rows}), view(tl, {rows}), backward);
    cross_entropy_rows(*be, view(l, {rows, padded}), vocab, view(mx, {rows}), view(sum, {rows}),
                             view(tl, {rows}), ids(targets), 0, losses.data(), backward, scale);
  };
  auto loss = [&] {
    std::vector<double> copy = logits, losses(rows);
    run(copy, losses, false);
    double l = 0;
    for (double v : losses) l += v;
    return scale * l;
  };
  std::vector<double> grad = logits, losses(rows);
  run(grad, losses, true);
  EXPECT_EQ(losses[1], 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = vocab; j < padded; ++j) EXPECT_EQ(grad[r * padded + j], 0.0);
  for (std::int64_t r : {0, 2}) {
    double mx = -1e300, sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) mx = std::max(mx, logits[r * padded + j]);
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[r * padded + j] - mx);
    for (std::int64_t j = 0; j < vocab; ++j) {
      double p = std::exp(logits[r * padded + j] - mx) / sum;
      EXPECT_NEAR(grad[r * padded + j], scale * (p - (j == targets[r] ? 1.0 : 0.0)), 1e-12);
    }
    EXPECT_NEAR(losses[r], std::log(sum) + mx - logits[r * padded + targets[r]], 1e-12);
  }
  for (std::int64_t j = 0; j < padded; ++j) EXPECT_EQ(grad[padded + j], 0.0);
  std::vector<double> analytic = grad;
  expect_gradient(loss, logits.data(), rows * padded, analytic.data(), "dlogits");
}

TEST_F(KernelGradients, CrossEntropyOverVocabularyShardsEqualsWhole) {
  // Two shards of 4 columns (vocabulary 7, so the second has 3 valid columns) combined the way
  // the vocabulary-parallel head combines them: max of maxima, sums of sums.
  const std::int64_t rows = 2, vocab = 7;
  std::vector<std::int32_t> targets = {6, 1};
  auto whole = random_vector(rows * 8, 18, 3.0);
  std::vector<double> mx(rows), sum(rows), tl(rows), losses(rows);
  auto w = whole;
  be->softmax_row_max(view(w, {rows, 8}), vocab, view(mx, {rows}));
  be->softmax_row_sum(view(w, {rows, 8}), vocab, view(mx, {rows}), ids(targets), 0,
                      view(sum, {rows}), view(tl, {rows}), true);
  cross_entropy_rows(*be, view(w, {rows, 8}), vocab, view(mx, {rows}), view(sum, {rows}),
                           view(tl, {rows}), ids(targets), 0, losses.data(), true, 1.0);

  std::vector<double> shard[2], smx[2], ssum[2], stl[2];
  for (int s = 0; s < 2; ++s) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < 4; ++j) shard[s].push_back(whole[r * 8 + s * 4 + j]);
    smx[s].resize(rows);
    be->softmax_row_max(view(shard[s], {rows, 4}), s == 0 ? 4 : 3, view(smx[s], {rows}));
  }
  std::vector<double> gmx(rows), gsum(rows, 0), gtl(rows, 0), slosses(rows);
  for (std::int64_t r = 0; r < rows; ++r) gmx[r] = std::max(smx[0][r], smx[1][r]);
  for (int s = 0; s < 2; ++s) {
    ssum[s].resize(rows);
    stl[s].resize(rows);
    be->softmax_row_sum(view(shard[s], {rows, 4}), s == 0 ? 4 : 3, view(gmx, {rows}),
                        ids(targets), s * 4, view(ssum[s], {rows}), view(stl[s], {rows}), true);
    for (std::int64_t r = 0; r < rows; ++r) {
      gsum[r] += ssum[s][r];
      gtl[r] += stl[s][r];
    }
  }
  for (int s = 0; s < 2; ++s) {
    cross_entropy_rows(*be, view(shard[s], {rows, 4}), s == 0 ? 4 : 3, view(gmx, {rows}),
                             view(gsum, {rows}), view(gtl, {rows}), ids(targets), s * 4,
                             slosses.data(), true, 1.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < 4; ++j)
        EXPECT_NEAR(shard[s][r * 4 + j], w[r * 8 + s * 4 + j], 1e-14);
  }
  for (std::int64_t r = 0; r < rows; ++r) EXPECT_NEAR(slosses[r], losses[r], 1e-12);
}

}  // namespace
}  // namespace kintsugi
