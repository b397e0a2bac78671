// Causal self-attention on cuDNN's graph API (attention_cudnn.hpp). The graphs are the ones
// cuDNN fuses into flash-attention kernels: the forward computes S = scale Q K^T, masks the
// keys after each query (two index generators and a comparison select the lowest float there),
// takes the softmax through a row maximum and a row sum, writes lse = max + log(sum), and
// multiplies P V; the backward recomputes P from lse, forms dV = P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dO * O)) scale, dK = dS^T Q and dQ = dS K. How dQ is formed decides
// determinism: written straight into dqkv, cuDNN's Hopper engines keep dP in a workspace and sum
// each dQ element in one place (its front end's "deterministic algorithm"); into an f32
// accumulator followed by a copy (its default), they add partial sums atomically. Mode
// deterministic builds the first, any the second. Each graph is built once per shape; cuDNN
// picks the engine (its heuristics' first that builds).
#include "kintsugi/backend/cuda/attention_cudnn.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"

#if KINTSUGI_WITH_CUDNN
#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/backend/cuda/cudnn_graph.hpp"
#endif

namespace kintsugi::cuda::attn_cudnn {

namespace {

Mode& current() {
  static Mode m = [] {
    const std::string& v = Switches::process().text(Switch::attn_cudnn);
    return v == "0" ? Mode::off : v == "any" ? Mode::any : Mode::deterministic;
  }();
  return m;
}

// Whether the call is one the graphs below describe (before asking cuDNN anything). A sliding
// window is not: the graphs are built with the plain causal mask only, so windowed shapes go
// to our kernels (attention.cu, attention_tc_*.cu), which apply it.
[[maybe_unused]] bool shape_fits(const AttnShape& s, const Ref& qkv, const Ref& lse) {
  return current() != Mode::off && (qkv.dtype == DType::bf16 || qkv.dtype == DType::f16) &&
         lse.dtype == DType::f32 && s.kv_heads == s.heads && s.alibi_heads == 0 &&
         s.doc_start == nullptr && s.window == 0 && s.head_dim % 8 == 0 && s.head_dim <= 128 &&
         s.seq > 0;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

std::size_t accumulator_bytes(const AttnShape& s) {
  return sizeof(float) * static_cast<std::size_t>(s.batch * s.heads * s.seq * s.head_dim);
}

std::size_t sums_bytes(const AttnShape& s) {
  return aligned(sizeof(float) * static_cast<std::size_t>(s.batch * s.heads * s.seq));
}

}  // namespace

Mode mode() { return current(); }
void set_mode(Mode m) { current() = m; }

std::size_t backward_scratch_bytes(const AttnShape& s) {
  if (current() == Mode::off) return 0;
  return sums_bytes(s) + (current() == Mode::any ? aligned(accumulator_bytes(s)) : 0);
}

#if KINTSUGI_WITH_CUDNN

namespace {

using cudnn::Graph;
using Kind = cudnn::Graph::Kind;

// Unique ids of the graphs' tensors (the numbering cuDNN's own front end gives them).
enum Uid : std::int64_t {
  kQ = 0, kKt = 1, kV = 2, kO = 3, kStats = 8, kScale = 5,
  // forward
  kS = 4, kScaled = 6, kRow = 7, kCol = 9, kVisible = 10, kMaskValue = 11, kMasked = 12,
  kP = 13, kMax = 14, kShifted = 15, kExp = 16, kSum = 17, kLogSum = 18,
  // backward (kVt is V^T, read through the same pointer as the forward's V)
  kVt = 2, kDoO = 4, kRowDot = 6, kOne = 7, kDo = 9, kDq = 10, kDk = 11, kDv = 12,
  kSoftmaxSum = 13, kBS = 14, kBScaled = 15, kBShifted = 16, kBRow = 17, kBCol = 18,
  kBVisible = 19, kBMaskValue = 20, kBMasked = 21, kBP = 22, kPt = 23, kDp = 24, kDpMinus = 25,
  kDpP = 26, kDs = 27, kDst = 28, kK = 29, kDqAcc = 30,
};

struct Geometry {
  std::int64_t b, h, t, d, row;  // row: elements from one token's qkv row to the next's
  cudnnDataType_t io;
  std::vector<std::int64_t> qkv_bhtd() const { return {t * row, 3 * d, row, 1}; }
  std::vector<std::int64_t> qkv_bhdt() const { return {t * row, 3 * d, 1, row}; }
  std::vector<std::int64_t> o_bhtd() const { return {t * h * d, d, h * d, 1}; }
  std::vector<std::int64_t> dense_bhtd() const { return {h * t * d, t * d, d, 1}; }
  std::vector<std::int64_t> scores() const { return {h * t * t, t * t, t, 1}; }
  std::vector<std::int64_t> scores_t() const { return {h * t * t, t * t, 1, t}; }
  std::vector<std::int64_t> rows() const { return {h * t, t, 1, 1}; }
  std::vector<std::int64_t> btd() const { return {b, h, t, d}; }
  std::vector<std::int64_t> bdt() const { return {b, h, d, t}; }
  std::vector<std::int64_t> btt() const { return {b, h, t, t}; }
  std::vector<std::int64_t> bt1() const { return {b, h, t, 1}; }
};

Geometry geometry(const AttnShape& s, const Ref& qkv) {
  return {s.batch, s.heads, s.seq, s.head_dim, 3 * s.heads * s.head_dim,
          qkv.dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF};
}

const std::vector<std::int64_t> kOne4{1, 1, 1, 1};

// f32 intermediates that never reach memory: [B, H, T, T] score matrices, [B, H, T, 1] rows.
void score_temps(Graph& g, const Geometry& m, std::initializer_list<std::int64_t> uids) {
  for (std::int64_t uid : uids)
    g.tensor(uid, CUDNN_DATA_FLOAT, m.btt(), m.scores(), Kind::virtual_);
}
void row_temps(Graph& g, const Geometry& m, std::initializer_list<std::int64_t> uids) {
  for (std::int64_t uid : uids)
    g.tensor(uid, CUDNN_DATA_FLOAT, m.bt1(), m.rows(), Kind::virtual_);
}

// The causal mask and the masked scores: x -> (row >= col ? x : masked), `masked` by value.
void causal_mask(Graph& g, const Geometry& m, std::int64_t x, std::int64_t row, std::int64_t col,
                 std::int64_t visible, std::int64_t masked, std::int64_t y) {
  g.tensor(row, CUDNN_DATA_INT32, m.btt(), m.scores(), Kind::virtual_);
  g.tensor(col, CUDNN_DATA_INT32, m.btt(), m.scores(), Kind::virtual_);
  g.tensor(visible, CUDNN_DATA_BOOLEAN, m.btt(), m.scores(), Kind::virtual_);
  g.tensor(masked, CUDNN_DATA_FLOAT, kOne4, kOne4, Kind::by_value);
  score_temps(g, m, {y});
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, -1, -1, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, -1, -1, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, visible, col, -1, -1, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, y, masked, visible);
}

// What both graphs read: Q and K^T, V (forward) or V^T (backward) in qkv, O, lse, the scale.
void inputs(Graph& g, const Geometry& m, bool v_transposed) {
  g.tensor(kQ, m.io, m.btd(), m.qkv_bhtd());
  g.tensor(kKt, m.io, m.bdt(), m.qkv_bhdt());
  if (v_transposed)
    g.tensor(kVt, m.io, m.bdt(), m.qkv_bhdt());
  else
    g.tensor(kV, m.io, m.btd(), m.qkv_bhtd());
  g.tensor(kO, m.io, m.btd(), m.o_bhtd());
  g.tensor(kStats, CUDNN_DATA_FLOAT, m.bt1(), m.rows());
  g.tensor(kScale, CUDNN_DATA_FLOAT, kOne4, kOne4, Kind::by_value);
}

Graph forward_graph(const Geometry& m) {
  Graph g;
  inputs(g, m, false);
  score_temps(g, m, {kS, kScaled, kShifted, kExp});
  row_temps(g, m, {kMax, kSum, kLogSum});
  g.tensor(kP, m.io, m.btt(), m.scores(), Kind::virtual_);
  g.matmul(kQ, kKt, kS);
  g.pointwise(CUDNN_POINTWISE_MUL, kS, kScaled, kScale);
  causal_mask(g, m, kScaled, kRow, kCol, kVisible, kMaskValue, kMasked);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, kMasked, kMax);
  g.pointwise(CUDNN_POINTWISE_SUB, kMasked, kShifted, kMax);
  g.pointwise(CUDNN_POINTWISE_EXP, kShifted, kExp);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, kExp, kSum);
  g.pointwise(CUDNN_POINTWISE_LOG, kSum, kLogSum);
  g.pointwise(CUDNN_POINTWISE_ADD, kMax, kStats, kLogSum);
  g.pointwise(CUDNN_POINTWISE_DIV, kExp, kP, kSum);
  g.matmul(kP, kV, kO);
  return g;
}

Graph backward_graph(const Geometry& m, bool deterministic) {
  Graph g;
  inputs(g, m, true);
  g.tensor(kDo, m.io, m.btd(), m.o_bhtd());
  g.tensor(kOne, CUDNN_DATA_FLOAT, kOne4, kOne4, Kind::by_value);
  g.tensor(kDq, m.io, m.btd(), m.qkv_bhtd());
  g.tensor(kDk, m.io, m.btd(), m.qkv_bhtd());
  g.tensor(kDv, m.io, m.btd(), m.qkv_bhtd());
  g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, m.bt1(), m.rows());
  if (!deterministic) g.tensor(kDqAcc, CUDNN_DATA_FLOAT, m.btd(), m.dense_bhtd());
  // rowsum(dO * O), the softmax's correction term
  g.tensor(kDoO, CUDNN_DATA_FLOAT, m.btd(), m.dense_bhtd(), Kind::virtual_);
  row_temps(g, m, {kRowDot});
  g.pointwise(CUDNN_POINTWISE_MUL, kDo, kDoO, kO);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, kDoO, kRowDot);
  g.pointwise(CUDNN_POINTWISE_MUL, kRowDot, kSoftmaxSum, kOne);
  // P again, from the forward's statistics
  score_temps(g, m, {kBS, kBScaled, kBShifted, kBP, kDp, kDpMinus, kDpP, kDs});
  g.matmul(kQ, kKt, kBS);
  g.pointwise(CUDNN_POINTWISE_MUL, kBS, kBScaled, kScale);
  g.pointwise(CUDNN_POINTWISE_SUB, kBScaled, kBShifted, kStats);
  causal_mask(g, m, kBShifted, kBRow, kBCol, kBVisible, kBMaskValue, kBMasked);
  g.pointwise(CUDNN_POINTWISE_EXP, kBMasked, kBP);
  // dV = P^T dO
  g.tensor(kPt, m.io, m.btt(), m.scores_t(), Kind::virtual_);
  g.reshape(kBP, kPt);
  g.matmul(kPt, kDo, kDv);
  // dS = P (dO V^T - rowsum) scale
  g.matmul(kDo, kVt, kDp);
  g.pointwise(CUDNN_POINTWISE_SUB, kDp, kDpMinus, kSoftmaxSum);
  g.pointwise(CUDNN_POINTWISE_MUL, kDpMinus, kDpP, kBP);
  g.pointwise(CUDNN_POINTWISE_MUL, kDpP, kDs, kScale);
  // dK = dS^T Q
  g.tensor(kDst, m.io, m.btt(), m.scores_t(), Kind::virtual_);
  g.reshape(kDs, kDst);
  g.matmul(kDst, kQ, kDk);
  // dQ = dS K, accumulated in f32 and then rounded into dqkv
  g.tensor(kK, CUDNN_DATA_FLOAT, m.btd(), m.qkv_bhtd(), Kind::virtual_);
  g.reshape(kKt, kK);
  if (deterministic) {
    g.matmul(kDs, kK, kDq);
  } else {
    g.matmul(kDs, kK, kDqAcc);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, kDqAcc, kDq);
  }
  return g;
}

// One plan per shape and direction; nullopt: cuDNN refused it (reported once).
using Key = std::tuple<bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, Mode>;

std::mutex plans_mutex;
std::map<Key, std::optional<cudnn::Plan>>& plans() {
  static std::map<Key, std::optional<cudnn::Plan>> p;
  return p;
}

const cudnn::Plan* plan(bool backward, const AttnShape& s, const Ref& qkv, cudaStream_t stream) {
  const Key key{backward, s.batch, s.heads, s.seq, s.head_dim, static_cast<int>(qkv.dtype),
                current()};
  std::lock_guard lock(plans_mutex);
  auto found = plans().find(key);
  if (found == plans().end()) {
    const char* direction = backward ? "backward" : "forward";
    std::optional<cudnn::Plan> built;
    std::string why;
    if (!cudnn::available(&why)) {
      static bool said = false;  // once, not once per shape
      if (!std::exchange(said, true))
        std::fprintf(stderr, "attention: cuDNN is not usable (%s): kintsugi's kernels run\n",
                     why.c_str());
    } else {
      try {
        const Geometry m = geometry(s, qkv);
        Graph g = backward ? backward_graph(m, current() == Mode::deterministic)
                           : forward_graph(m);
        built = g.build(cudnn::handle(stream), current() == Mode::deterministic);
        std::fprintf(stderr, "attention %s: cuDNN %s, workspace %lld bytes (B %lld, H %lld, "
                     "T %lld, D %lld)\n", direction, built->engine.c_str(),
                     static_cast<long long>(built->workspace), static_cast<long long>(s.batch),
                     static_cast<long long>(s.heads), static_cast<long long>(s.seq),
                     static_cast<long long>(s.head_dim));
      } catch (const Error& e) {
        std::fprintf(stderr, "attention %s: cuDNN refused the graph, kintsugi's kernels run: %s\n",
                     direction, e.what());
      }
    }
    found = plans().emplace(key, std::move(built)).first;
  }
  return found->second ? &*found->second : nullptr;
}

// cuDNN's workspace, kept and grown for the largest plan run so far.
void* workspace(std::int64_t bytes) {
  static void* data = nullptr;
  static std::int64_t size = 0;
  if (bytes > size) {
    if (data) check(cudaFree(data), "cudaFree (cuDNN workspace)");
    check(cudaMalloc(&data, static_cast<std::size_t>(bytes)), "cudaMalloc (cuDNN workspace)");
    size = bytes;
  }
  return data;
}

unsigned char* bytes(const Ref& r) { return static_cast<unsigned char*>(r.data); }

// The scores' scale, passed by value with the dropout correction (none: 1) and the value of
// the masked scores: -infinity from cuDNN 9.10 on, the lowest float before (what cuDNN's front
// end passes; exp of either less the row's maximum is 0).
float softmax_scale(const AttnShape& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
}
float masked_value() {
  return cudnn::version() >= 91000 ? -std::numeric_limits<float>::infinity()
                                   : std::numeric_limits<float>::lowest();
}

}  // namespace

bool usable(std::string* why) { return cudnn::available(why); }

bool takes_forward(const AttnShape& s, const Ref& qkv, const Ref& lse) {
  return shape_fits(s, qkv, lse) && plan(false, s, qkv, Context::get().stream()) != nullptr;
}

bool takes_backward(const AttnShape& s, const Ref& qkv, const Ref& lse) {
  return shape_fits(s, qkv, lse) && plan(true, s, qkv, Context::get().stream()) != nullptr;
}

void forward(const AttnShape& s, Ref qkv, Ref out, Ref lse, cudaStream_t stream) {
  const cudnn::Plan* p = plan(false, s, qkv, stream);
  if (!p) throw Error("attention: cuDNN has no plan for this forward");
  const std::size_t d = static_cast<std::size_t>(s.head_dim) * 2;  // bytes of one head's q
  float scale = softmax_scale(s), masked = masked_value();
  cudnn::execute(cudnn::handle(stream), *p, {kQ, kKt, kV, kO, kStats, kScale, kMaskValue},
                 {bytes(qkv), bytes(qkv) + d, bytes(qkv) + 2 * d, out.data, lse.data, &scale,
                  &masked},
                 workspace(p->workspace));
}

void backward(const AttnShape& s, Ref qkv, Ref out, Ref lse, Ref dout, Ref dqkv, Scratch scratch,
              cudaStream_t stream) {
  const cudnn::Plan* p = plan(true, s, qkv, stream);
  if (!p) throw Error("attention: cuDNN has no plan for this backward");
  if (scratch.bytes < backward_scratch_bytes(s))
    throw Error(fmt::format("attention: cuDNN's backward needs {} bytes of scratch, given {}",
                            backward_scratch_bytes(s), scratch.bytes));
  const std::size_t d = static_cast<std::size_t>(s.head_dim) * 2;
  float scale = softmax_scale(s), one = 1.0f, masked = masked_value();
  unsigned char* sums = static_cast<unsigned char*>(scratch.data);
  std::vector<std::int64_t> uids{kQ,   kKt,    kVt,      kO,          kDo, kStats, kScale,
                                 kOne, kBMaskValue, kSoftmaxSum, kDq, kDk,    kDv};
  std::vector<void*> pointers{bytes(qkv), bytes(qkv) + d, bytes(qkv) + 2 * d, out.data,
                              dout.data,  lse.data,       &scale,             &one,
                              &masked,    sums,           bytes(dqkv),        bytes(dqkv) + d,
                              bytes(dqkv) + 2 * d};
  if (current() == Mode::any) {  // the f32 dQ accumulator, zeroed (cuDNN before 9.6 needs it)
    unsigned char* accumulator = sums + sums_bytes(s);
    check(cudaMemsetAsync(accumulator, 0, accumulator_bytes(s), stream), "cudaMemsetAsync (dQ)");
    uids.push_back(kDqAcc);
    pointers.push_back(accumulator);
  }
  cudnn::execute(cudnn::handle(stream), *p, uids, pointers, workspace(p->workspace));
}

#else  // a build without cuDNN (or the CUDA emulator's): cuDNN never takes a call

namespace {
bool absent() {
  static const bool said = current() != Mode::off &&
      std::fprintf(stderr, "attention: KINTSUGI_ATTN_CUDNN is set but this build has no cuDNN: "
                   "kintsugi's kernels run\n") > 0;
  (void)said;
  return false;
}
}  // namespace

bool usable(std::string* why) {
  if (why) *why = "this build has no cuDNN";
  return false;
}

bool takes_forward(const AttnShape&, const Ref&, const Ref&) {
  return absent();
}
bool takes_backward(const AttnShape&, const Ref&, const Ref&) {
  return absent();
}

void forward(const AttnShape&, Ref, Ref, Ref, cudaStream_t) {
  throw Error("attention: this build has no cuDNN");
}
void backward(const AttnShape&, Ref, Ref, Ref, Ref, Ref, Scratch, cudaStream_t) {
  throw Error("attention: this build has no cuDNN");
}

#endif

}  // namespace kintsugi::cuda::attn_cudnn
