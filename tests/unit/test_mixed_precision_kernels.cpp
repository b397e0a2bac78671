// Mixed-precision CPU kernels (backend.hpp's element-type rules) against the f32 kernels.
//
// Every op runs twice on the same random values: once with every tensor f32 (the reference, the
// f32 kernels that the f64 gradient checks vouch for), once with the tensors stored as bf16, f16
// or a typical training mix. Outputs must agree within a tolerance relative to the output's
// scale (its largest reference magnitude), set by the narrowest type among the op's tensors:
//   bf16 (8-bit significand):  1e-2     f16 (11-bit significand):  2e-3
// Attention's backward chains rounded products (dS = P * (dP - delta), then dS . K) and gets
// twice that; every other op meets the plain tolerance.
// Rounding itself is checked against independent references: bit-level round-to-nearest-even
// for bf16 and the compiler's _Float16 for f16.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mixed_precision_fixture.hpp"
#include "op_helpers.hpp"
#include "support/attention_case.hpp"

namespace kintsugi {
namespace {

using namespace mixed_test;
using testing::AttentionCase;
using testing::attention_case_name;
using testing::cross_entropy_rows;
using testing::ids;
using testing::sum_squares;


// ---- dense algebra

struct LinearShape {
  std::int64_t m, k, n;
};
const LinearShape kLinearShapes[] = {{1, 1, 1}, {7, 13, 5}, {37, 64, 29}, {130, 67, 301},
                                     {64, 800, 40}};

TEST_F(MixedPrecision, LinearForward) {
  for (const auto& [m, k, n] : kLinearShapes) {
    const std::vector<Arg> args{{{m, k}, random_values(m * k, 1)},
                                {{n, k}, random_values(n * k, 2, 0.2f)},
                                {{n}, random_values(n, 3)},
                                {{m, n}, random_values(m * n, 4)}};
    const std::string what = "linear_forward " + std::to_string(m) + "x" + std::to_string(k) +
                             "x" + std::to_string(n);
    for (bool accumulate : {false, true})
      for (bool with_bias : {false, true}) {
        const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
          b.linear_forward(t[0], t[1], with_bias ? &t[2] : nullptr, t[3], accumulate);
        };
        const std::string w = what + (accumulate ? " accumulate" : "") + (with_bias ? " bias" : "");
        compare(w, args, {bf16, bf16, bf16, bf16}, {3}, op);
        compare(w, args, {f16, f16, f16, f16}, {3}, op);
        compare(w, args, {bf16, bf16, bf16, f32}, {3}, op);  // LM-head logits in f32
        compare(w, args, {f32, f16, f32, f32}, {3}, op);     // f16 weights, f32 activations
        compare(w, args, {f16, bf16, f32, f16}, {3}, op);    // bf16 meets f16: product in bf16
      }
  }
}

TEST_F(MixedPrecision, LinearBackward) {
  for (const auto& [m, k, n] : kLinearShapes) {
    const std::vector<Arg> args{{{m, n}, random_values(m * n, 5)},       // dy
                                {{n, k}, random_values(n * k, 6, 0.2f)},  // w
                                {{m, k}, random_values(m * k, 7)},        // x
                                {{m, k}, random_values(m * k, 8)},        // dx
                                {{n, k}, random_values(n * k, 9)},        // dw
                                {{n}, random_values(n, 10)}};             // db
    const std::string what = "linear_backward " + std::to_string(m) + "x" + std::to_string(k) +
                             "x" + std::to_string(n);
    for (bool accumulate : {false, true}) {
      const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
        b.linear_backward_input(t[0], t[1], t[3], accumulate);
        b.linear_backward_weight(t[0], t[2], t[4], &t[5], accumulate);
      };
      const std::string w = what + (accumulate ? " accumulate" : "");
      compare(w, args, {bf16, bf16, bf16, bf16, bf16, bf16}, {3, 4, 5}, op);
      compare(w, args, {f16, f16, f16, f16, f16, f16}, {3, 4, 5}, op);
      // Training's mix: bf16 activations and weights, f32 parameter gradients.
      compare(w, args, {bf16, bf16, bf16, bf16, f32, f32}, {3, 4, 5}, op);
      // The LM head: f32 dlogits against bf16 weights and inputs.
      compare(w, args, {f32, bf16, bf16, bf16, f32, f32}, {3, 4, 5}, op);
    }
  }
}

// A bf16 GEMM with f32 accumulation is exact on small integers: every product and partial sum
// is an integer below 2^24, so it must equal the f32 GEMM bit for bit, whatever the blocking.
TEST_F(MixedPrecision, Bf16GemmIsExactOnSmallIntegers) {
  auto ints = [](std::int64_t n, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> d(-3, 3);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = float(d(gen));
    return v;
  };
  for (const auto& [m, k, n] : {LinearShape{5, 3, 7}, LinearShape{50, 1000, 70},
                                LinearShape{200, 77, 4200}}) {
    Storage st;
    const auto xv = ints(m * k, 11), wv = ints(n * k, 12), dyv = ints(m * n, 13);
    Tensor x32 = st.make(f32, {m, k}, xv), w32 = st.make(f32, {n, k}, wv);
    Tensor x16 = st.make(bf16, {m, k}, xv), w16 = st.make(bf16, {n, k}, wv);
    Tensor dy32 = st.make(f32, {m, n}, dyv), dy16 = st.make(bf16, {m, n}, dyv);
    Tensor y_ref = st.make(f32, {m, n}, std::vector<float>(m * n));
    Tensor y = st.make(f32, {m, n}, std::vector<float>(m * n));
    be->linear_forward(x32, w32, nullptr, y_ref);
    be->linear_forward(x16, w16, nullptr, y);
    EXPECT_EQ(Storage::values(y), Storage::values(y_ref)) << "forward " << m << "x" << k << "x" << n;
    Tensor dx_ref = st.make(f32, {m, k}, std::vector<float>(m * k));
    Tensor dx = st.make(f32, {m, k}, std::vector<float>(m * k));
    be->linear_backward_input(dy32, w32, dx_ref, false);
    be->linear_backward_input(dy16, w16, dx, false);
    EXPECT_EQ(Storage::values(dx), Storage::values(dx_ref)) << "backward input";
    Tensor dw_ref = st.make(f32, {n, k}, std::vector<float>(n * k));
    Tensor dw = st.make(f32, {n, k}, std::vector<float>(n * k));
    be->linear_backward_weight(dy32, x32, dw_ref, nullptr, false);
    be->linear_backward_weight(dy16, x16, dw, nullptr, false);
    EXPECT_EQ(Storage::values(dw), Storage::values(dw_ref)) << "backward weight";
  }
}

// ---- normalization, activations

TEST_F(MixedPrecision, LayerNorm) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 7},
                                   {33, 130}, {9, 768}}) {
    const std::vector<Arg> args{{{rows, cols}, random_values(rows * cols, 14, 2.0f)},  // x
                                {{cols}, random_values(cols, 15)},                     // w
                                {{cols}, random_values(cols, 16)},                     // b
                                {{rows, cols}, random_values(rows * cols, 17)},        // y
                                {{rows}, random_values(rows, 18)},                     // mean
                                {{rows}, random_values(rows, 19)},                     // rstd
                                {{rows, cols}, random_values(rows * cols, 20)},        // dy
                                {{rows, cols}, random_values(rows * cols, 21)},        // dx
                                {{cols}, random_values(cols, 22)},                     // dw
                                {{cols}, random_values(cols, 23)}};                    // db
    for (bool accumulate : {false, true}) {
      const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
        b.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5);
        b.layernorm_backward(t[6], t[0], t[1], t[4], t[5], t[7], t[8], t[9], accumulate);
      };
      const std::string what = "layernorm " + std::to_string(rows) + "x" + std::to_string(cols);
      for (DType t : {bf16, f16})
        compare(what, args, std::vector<DType>(10, t), {3, 4, 5, 7, 8, 9}, op);
      compare(what, args, {bf16, bf16, bf16, bf16, f32, f32, bf16, bf16, f32, f32},
              {3, 4, 5, 7, 8, 9}, op);
    }
  }
}

TEST_F(MixedPrecision, Gelu) {
  for (std::int64_t n : {1, 17, 5000}) {
    const std::vector<Arg> args{{{n}, random_values(n, 24, 3.0f)},
                                {{n}, random_values(n, 25)},
                                {{n}, random_values(n, 26)},
                                {{n}, random_values(n, 27)}};
    const Op op = [](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
      b.gelu_forward(t[0], t[1]);
      b.gelu_backward(t[0], t[2], t[3]);
      b.gelu_backward(t[0], t[2], t[2]);  // dx aliasing dy
    };
    for (DType t : {bf16, f16}) compare("gelu", args, {t, t, t, t}, {1, 2, 3}, op);
    compare("gelu", args, {bf16, f32, f16, bf16}, {1, 2, 3}, op);
  }
}

// ---- attention

class MixedAttention : public MixedPrecision,
                       public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(MixedAttention, MatchesF32) {
  const auto c = GetParam();
  const AttentionShape s{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim};
  const std::int64_t qkv_n = c.batch * c.seq * (c.heads + 2 * c.kv_heads) * c.head_dim;
  const std::int64_t out_n = c.batch * c.seq * c.heads * c.head_dim;
  const std::int64_t lse_n = c.batch * c.heads * c.seq;
  const std::vector<Arg> args{{{qkv_n}, random_values(qkv_n, 28)},
                              {{out_n}, random_values(out_n, 29)},
                              {{lse_n}, random_values(lse_n, 30)},
                              {{out_n}, random_values(out_n, 31)},
                              {{qkv_n}, random_values(qkv_n, 32)}};
  const Op forward = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
    b.attention_forward(s, t[0], t[1], t[2]);
  };
  // Backward on the forward's own out and lse (as in training).
  const Op both = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
    b.attention_forward(s, t[0], t[1], t[2]);
    b.attention_backward(s, t[0], t[1], t[2], t[3], t[4]);
  };
  for (DType t : {bf16, f16}) {
    compare("attention forward", args, {t, t, t, t, t}, {1, 2}, forward);
    compare("attention backward", args, {t, t, t, t, t}, {4}, both, 2.0);
  }
  // Training's mix: bf16 activations, f32 log-sum-exp.
  compare("attention forward", args, {bf16, bf16, f32, bf16, bf16}, {1, 2}, forward);
  compare("attention backward", args, {bf16, bf16, f32, bf16, bf16}, {4}, both, 2.0);
  // f32 qkv with 16-bit outputs: the f32 engine, each output rounded once.
  compare("attention backward", args, {f32, bf16, f32, f16, bf16}, {1, 2, 4}, both);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MixedAttention,
                         ::testing::Values(AttentionCase{2, 5, 2, 2, 4},
                                           AttentionCase{1, 70, 1, 1, 3},   // odd head_dim
                                           AttentionCase{2, 33, 4, 2, 8},   // grouped query
                                           AttentionCase{1, 100, 2, 2, 64}),
                         [](const auto& info) { return attention_case_name(info.param); });

// ---- embeddings

TEST_F(MixedPrecision, Embeddings) {
  const std::int64_t vocab = 11, dim = 70, seq = 4, rows = 12, positions = 6;
  const std::vector<std::int32_t> tokens = {3, 7, 3, 0, 9, 9, 1, 3, 10, 12, 3, 5};
  const std::vector<Arg> args{{{vocab, dim}, random_values(vocab * dim, 33)},         // wte
                              {{rows, dim}, random_values(rows * dim, 34)},           // out
                              {{positions, dim}, random_values(positions * dim, 35)},  // wpe
                              {{rows, dim}, random_values(rows * dim, 36)},            // dout
                              {{vocab, dim}, random_values(vocab * dim, 37)},          // dwte
                              {{positions, dim}, random_values(positions * dim, 38)}};  // dwpe
  for (bool accumulate : {false, true})
    for (std::int64_t begin : {0, 2}) {
      const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
        b.embedding_forward(ids(tokens), t[0], t[1], begin);
        b.position_embedding_forward(t[1], t[2], seq, 3);
        b.embedding_backward(ids(tokens), t[3], t[4], accumulate, begin);
        b.position_embedding_backward(t[3], t[5], seq, accumulate, 3);
      };
      for (DType t : {bf16, f16}) compare("embeddings", args, {t, t, t, t, t, t}, {1, 4, 5}, op);
      compare("embeddings", args, {bf16, bf16, bf16, bf16, f32, f32}, {1, 4, 5}, op);
    }
}

// A 16-bit gradient table is rounded once per entry, not after every token that hits it.
TEST_F(MixedPrecision, EmbeddingGradientRoundsOnce) {
  const std::int64_t dim = 3, rows = 300;
  std::vector<std::int32_t> tokens(rows, 1);
  Storage st;
  Tensor dout = st.make(bf16, {rows, dim}, std::vector<float>(rows * dim, 1.0f));
  Tensor dwte = st.make(bf16, {2, dim}, std::vector<float>(2 * dim, 5.0f));
  be->embedding_backward(ids(tokens), dout, dwte, false);
  // 300 ones: a bf16 running sum would stall at 256.
  EXPECT_EQ(Storage::values(dwte), (std::vector<float>{0, 0, 0, 300, 300, 300}));
}

// ---- loss

TEST_F(MixedPrecision, CrossEntropy) {
  const std::int64_t rows = 9, cols = 517, valid = 510;
  const std::vector<std::int32_t> targets = {5, -1, 500, 3, 516, 0, 7, 100, 2};
  const std::vector<Arg> args{{{rows, cols}, random_values(rows * cols, 39, 3.0f)},
                              {{rows}, std::vector<float>(rows)},
                              {{rows}, std::vector<float>(rows)},
                              {{rows}, std::vector<float>(rows)}};
  for (bool backward : {false, true}) {
    const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>& losses) {
      losses.assign(rows, 0);
      b.softmax_row_max(t[0], valid, t[1]);
      b.softmax_row_sum(t[0], valid, t[1], ids(targets), 3, t[2], t[3], backward);
      cross_entropy_rows(b, t[0], valid, t[1], t[2], t[3], ids(targets), 3, losses.data(),
                             backward, 0.3);
    };
    const std::vector<int> outputs = backward ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{1, 2, 3};
    for (DType t : {bf16, f16}) compare("cross entropy", args, {t, t, t, t}, outputs, op);
    compare("cross entropy", args, {bf16, f32, f32, f32}, outputs, op);
  }
}

// ---- elementwise, reductions, optimizer

TEST_F(MixedPrecision, Elementwise) {
  for (std::int64_t rows : {1, 3, 1000}) {
    const std::int64_t cols = 7, n = rows * cols;
    const std::vector<Arg> args{{{rows, cols}, random_values(n, 40)},
                                {{rows, cols}, random_values(n, 41)},
                                {{rows, cols}, random_values(n, 42)},
                                {{cols}, random_values(cols, 43)}};
    const Op op = [](Backend& b, const std::vector<Tensor>& t, std::vector<double>& sums) {
      b.add(t[0], t[1], t[2]);
      b.add(t[0], t[1], t[0]);  // in place, as the residual stream does
      b.add_bias(t[2], t[3]);
      b.scale(t[2], 0.37);
      sums = {sum_squares(b, t[2]), sum_squares(b, t[1])};
    };
    for (DType t : {bf16, f16}) compare("elementwise", args, {t, t, t, t}, {0, 2}, op);
    compare("elementwise", args, {bf16, f32, f16, bf16}, {0, 2}, op);
  }
}

TEST_F(MixedPrecision, SumSquaresOverManyChunks) {
  const std::int64_t n = 300001;
  const std::vector<Arg> args{{{n}, random_values(n, 44)}};
  const Op op = [](Backend& b, const std::vector<Tensor>& t, std::vector<double>& sums) {
    sums = {sum_squares(b, t[0])};
  };
  compare("sum_squares", args, {bf16}, {}, op);
  compare("sum_squares", args, {f16}, {}, op);
}

TEST_F(MixedPrecision, AdamWWithWorkingCopy) {
  const std::int64_t n = 100003;  // several chunks and a ragged end
  Storage st;
  for (DType wc_type : {bf16, f16, f32}) {
    for (DType grad_type : {f32, bf16}) {
      Tensor p_ref = st.make(f32, {n}, random_values(n, 45));
      Tensor p = st.make(f32, {n}, random_values(n, 45));
      auto gv = random_values(n, 46);
      for (auto& g : gv) g = round_to(grad_type, g);  // the same gradient values in both runs
      Tensor g_ref = st.make(f32, {n}, gv), g = st.make(grad_type, {n}, gv);
      Tensor m_ref = st.make(f32, {n}, std::vector<float>(n)), m = st.make(f32, {n}, std::vector<float>(n));
      Tensor v_ref = st.make(f32, {n}, std::vector<float>(n)), v = st.make(f32, {n}, std::vector<float>(n));
      Tensor wc = st.make(wc_type, {n}, std::vector<float>(n));
      AdamWHyper h{.lr = 1e-2, .weight_decay = 0.1, .grad_scale = 0.5};
      for (h.step = 1; h.step <= 3; ++h.step) {
        be->adamw_step(p_ref, g_ref, m_ref, v_ref, h);
        be->adamw_step(p, g, m, v, h, &wc);
      }
      const std::string what = std::string("working copy ") + std::string(name_of(wc_type)) +
                               ", grad " + std::string(name_of(grad_type));
      // The master copy and the moments are exactly the f32 kernel's.
      EXPECT_EQ(std::memcmp(p.data, p_ref.data, p.bytes()), 0) << what;
      EXPECT_EQ(std::memcmp(m.data, m_ref.data, m.bytes()), 0) << what;
      EXPECT_EQ(std::memcmp(v.data, v_ref.data, v.bytes()), 0) << what;
      // The working copy is the master rounded.
      const auto master = Storage::values(p), copy = Storage::values(wc);
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += copy[i] != round_to(wc_type, master[i]);
      EXPECT_EQ(wrong, 0) << what;
    }
  }
}

// ---- Llama and BLOOM ops

TEST_F(MixedPrecision, RmsNorm) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 7}, {33, 130}}) {
    const std::vector<Arg> args{{{rows, cols}, random_values(rows * cols, 60, 2.0f)},  // x
                                {{cols}, random_values(cols, 61)},                     // w
                                {{rows, cols}, random_values(rows * cols, 62)},        // y
                                {{rows}, random_values(rows, 63)},                     // rstd
                                {{rows, cols}, random_values(rows * cols, 64)},        // dy
                                {{rows, cols}, random_values(rows * cols, 65)},        // dx
                                {{cols}, random_values(cols, 66)}};                    // dw
    for (bool accumulate : {false, true}) {
      const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
        b.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5);
        b.rmsnorm_backward(t[4], t[0], t[1], t[3], t[5], t[6], accumulate);
      };
      for (DType t : {bf16, f16}) compare("rmsnorm", args, std::vector<DType>(7, t), {2, 3, 5, 6}, op);
      compare("rmsnorm", args, {bf16, bf16, bf16, f32, bf16, bf16, f32}, {2, 3, 5, 6}, op);
    }
  }
}

TEST_F(MixedPrecision, SwiGlu) {
  for (std::int64_t n : {1, 17, 5000}) {
    const std::vector<Arg> args{{{n}, random_values(n, 67, 3.0f)},  // gate
                                {{n}, random_values(n, 68)},        // up
                                {{n}, random_values(n, 69)},        // y
                                {{n}, random_values(n, 70)},        // dy, then dgate in place
                                {{n}, random_values(n, 71)},        // dup
                                {{n}, random_values(n, 72)}};       // dgate
    const Op op = [](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
      b.swiglu_forward(t[0], t[1], t[2]);
      b.swiglu_backward(t[0], t[1], t[3], t[5], t[4]);
      b.swiglu_backward(t[0], t[1], t[3], t[3], t[4]);  // dgate aliasing dy
    };
    for (DType t : {bf16, f16}) compare("swiglu", args, std::vector<DType>(6, t), {2, 3, 4, 5}, op);
    compare("swiglu", args, {bf16, bf16, bf16, f32, f32, f32}, {2, 3, 4, 5}, op);
  }
}

TEST_F(MixedPrecision, Rope) {
  const AttentionShape s{.batch = 2, .seq = 33, .heads = 4, .kv_heads = 2, .head_dim = 8};
  const std::int64_t n = 2 * 33 * (4 + 4) * 8;
  const std::vector<Arg> args{{{n}, random_values(n, 73)}, {{n}, random_values(n, 74)}};
  const Op op = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
    b.rope(s, t[0], 10000.0, false);
    b.rope(s, t[1], 10000.0, true);
  };
  for (DType t : {bf16, f16}) compare("rope", args, {t, t}, {0, 1}, op);
}

TEST_F(MixedPrecision, AlibiAttention) {
  const AttentionShape s{.batch = 2, .seq = 40, .heads = 4, .kv_heads = 4, .head_dim = 8,
                         .alibi_heads = 8, .head_begin = 4};
  const std::int64_t qkv_n = 2 * 40 * 12 * 8, out_n = 2 * 40 * 4 * 8, lse_n = 2 * 4 * 40;
  const std::vector<Arg> args{{{qkv_n}, random_values(qkv_n, 75)},
                              {{out_n}, random_values(out_n, 76)},
                              {{lse_n}, random_values(lse_n, 77)},
                              {{out_n}, random_values(out_n, 78)},
                              {{qkv_n}, random_values(qkv_n, 79)}};
  const Op both = [&](Backend& b, const std::vector<Tensor>& t, std::vector<double>&) {
    b.attention_forward(s, t[0], t[1], t[2]);
    b.attention_backward(s, t[0], t[1], t[2], t[3], t[4]);
  };
  for (DType t : {bf16, f16}) compare("alibi attention", args, {t, t, f32, t, t}, {1, 2, 4}, both, 2.0);
  compare("alibi attention", args, {f32, bf16, f32, f16, bf16}, {1, 2, 4}, both);
}

}  // namespace
}  // namespace kintsugi