#include "kintsugi/backend/cuda/gemm.hpp"

#include <cublasLt.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/backend/cuda/gemm_algorithms.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // what Hopper's kernels want
// Autotuning: cuBLASLt's candidates timed per shape, and calls timed per candidate (after one
// untimed call). A candidate other than the heuristic's first choice must be this much faster
// to be kept, so that timing noise does not trade kernels that are alike.
constexpr int kCandidates = 8;
constexpr int kTimedCalls = 5;
constexpr double kMargin = 0.98;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      KINTSUGI_ASSERT(false);
  }
  return CUDA_R_32F;
}

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
std::uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// Epilogue vectors and matrices are given to cuBLASLt on 16-byte boundaries (its documented
// requirement for the bias), else the work is done without the epilogue.
bool epilogue_aligned(const void* p) { return alignment(p) >= 16; }

void lt_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt error in {}: status {}", what, static_cast<int>(status));
}

template <class T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  lt_check(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(T)),
           "cublasLtMatmulDescSetAttribute");
}

}  // namespace

GemmOptions GemmOptions::from(const Switches& switches) {
  // The bias gradient's epilogue is opt-in: on an H200 (docs/gpu.md, "Measured") the GPT-2
  // 124M step took 79.0 ms with it and 78.4 without, the typed column sums being as fast as the
  // epilogue's share of the GEMM.
  return {.bias_gradient = switches.on(Switch::gemm_bgrad),
          .gelu = switches.on(Switch::gemm_gelu),
          .autotune = switches.on(Switch::gemm_autotune)};
}

// One cuBLASLt call: D = op(A) op(B) (+ D when accumulating) with its epilogue, the operands
// already in the product's type.
struct Gemm::LtCall {
  std::int64_t m, n, k;
  Ref a;
  bool trans_a;
  Ref b;
  bool trans_b;
  Ref d;
  bool accumulate;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // BIAS*: the bias, read; BGRADB: the row sums, written (D's type)
  void* aux = nullptr;   // GELU_AUX*: GELU's input, written; DGELU: read ([m, n] like D)
};

// Descriptors of one shape and its algorithm (cuBLAS is column-major: the row-major product
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. with A and B swapped; our row sums
// of op(A) are then the column sums of cuBLAS's op(B): BGRADB).
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

// cuBLASLt's candidates for one call, best first by its heuristic's estimate.
struct Gemm::Candidates {
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  int count = 0;
};

Gemm::Gemm(Allocator& allocator, MemoryTracker& memory, GemmOptions options)
    : options_(options),
      allocator_(allocator),
      memory_(memory),
      workspace_(allocator, memory, MemoryKind::workspace, kWorkspaceBytes),
      a_(allocator, memory),
      b_(allocator, memory),
      c_(allocator, memory),
      bias_(allocator, memory),
      sums_(allocator, memory),
      partials_(allocator, memory) {
  if (options_.autotune) {
    const Context& context = Context::get();
    store_ = std::make_unique<AlgorithmStore>(context.device_name(), context.multiprocessors(),
                                              static_cast<std::int64_t>(cublasLtGetVersion()));
  }
}

Gemm::~Gemm() = default;

std::shared_ptr<Gemm::Plan> Gemm::make_plan(const LtCall& call, const PlanKey& key,
                                            cudaStream_t stream) {
  const std::int64_t m = call.m, n = call.n, k = call.k;
  const bool f64 = call.a.dtype == DType::f64;
  auto plan = std::make_shared<Plan>();
  const cudaDataType_t ab = cuda_type(call.a.dtype), dt = cuda_type(call.d.dtype);
  lt_check(cublasLtMatmulDescCreate(&plan->desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                    f64 ? CUDA_R_64F : CUDA_R_32F),
           "cublasLtMatmulDescCreate");
  // cuBLAS's A is our B and its B our A (see Plan).
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (call.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, call.epilogue);
    // The heuristic reads the epilogue pointers' alignment (never their data): set them now.
    if (call.bias) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
    if (call.aux) {
      set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux);
      set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t{n});  // D's
    }
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  lt_check(call.trans_b ? cublasLtMatrixLayoutCreate(&plan->a, ab, u(k), u(n), k)
                        : cublasLtMatrixLayoutCreate(&plan->a, ab, u(n), u(k), n),
           "cublasLtMatrixLayoutCreate (A)");
  lt_check(call.trans_a ? cublasLtMatrixLayoutCreate(&plan->b, ab, u(m), u(k), m)
                        : cublasLtMatrixLayoutCreate(&plan->b, ab, u(k), u(m), k),
           "cublasLtMatrixLayoutCreate (B)");
  lt_check(cublasLtMatrixLayoutCreate(&plan->d, dt, u(n), u(m), n),
           "cublasLtMatrixLayoutCreate (D)");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t ws = kWorkspaceBytes;
  const std::uint32_t align_a = alignment(call.b.data), align_b = alignment(call.a.data),
                      align_d = alignment(call.d.data);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                       sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                       sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                       sizeof(align_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                       sizeof(align_d));
  // A choice stored by an earlier tuning, if cuBLASLt still takes it for this call.
  const std::string shape = fmt::format(
      "{}x{}x{} {} -> {}{}{}{} epilogue {} alignment {}/{}/{}/{}/{}", key[0], key[1], key[2],
      name_of(call.a.dtype), name_of(call.d.dtype), call.trans_a ? " trans_a" : "",
      call.trans_b ? " trans_b" : "", call.accumulate ? " accumulate" : "", key[8], key[9],
      key[10], key[11], key[12], key[13]);
  std::optional<AlgorithmBytes> stored;
  if (store_) stored = store_->find(shape);
  if (stored) {
    static_assert(sizeof(AlgorithmBytes) == sizeof(cublasLtMatmulAlgo_t));
    std::memcpy(&plan->algo, stored->data(), sizeof(plan->algo));
    cublasLtMatmulHeuristicResult_t fits{};
    if (cublasLtMatmulAlgoCheck(Context::get().blas(), plan->desc, plan->a, plan->b, plan->d,
                                plan->d, &plan->algo, &fits) == CUBLAS_STATUS_SUCCESS &&
        fits.workspaceSize <= kWorkspaceBytes) {
      cublasLtMatmulPreferenceDestroy(pref);
      plan->found = true;
      ++tuning_.loaded;
      return plan;
    }
  }
  Candidates c;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      Context::get().blas(), plan->desc, plan->a, plan->b, plan->d, plan->d, pref,
      store_ ? kCandidates : 1, c.results, &c.count);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->found = status == CUBLAS_STATUS_SUCCESS && c.count > 0;
  if (!plan->found) return plan;
  plan->algo = c.results[0].algo;
  if (!store_) return plan;  // the heuristic's first choice
  if (c.count == 1) {
    ++tuning_.single;
    return plan;
  }
  const TunedAlgorithm tuned = time_candidates(*plan, call, c, stream);
  if (tuned.candidates == 0) {  // none ran: this call goes the other way
    plan->found = false;
    return plan;
  }
  const AlgorithmBytes kept = store_->store(shape, tuned, stored);
  std::memcpy(&plan->algo, kept.data(), sizeof(plan->algo));
  ++tuning_.tuned;
  tuning_.seconds += tuned.tuning_ms / 1e3;
  return plan;
}

TunedAlgorithm Gemm::time_candidates(const Plan& plan, const LtCall& call, const Candidates& c,
                                     cudaStream_t stream) {
  const auto start_time = std::chrono::steady_clock::now();
  // Outputs go to scratch, never to the call's own (accumulating would change them): D, the row
  // sums (BGRADB) and GELU's input (GELU_AUX*). Inputs, the bias and DGELU's aux are read where
  // they are. Zero-filled, so that accumulating reads numbers.
  const std::size_t d_bytes = static_cast<std::size_t>(call.m * call.n) * size_of(call.d.dtype);
  const auto round_up = [](std::size_t b) { return (b + 255) / 256 * 256; };
  const bool sums = call.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const bool aux_out = call.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                       call.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const std::size_t sums_bytes =
      sums ? round_up(static_cast<std::size_t>(call.m) * size_of(call.d.dtype)) : 0;
  Buffer scratch(allocator_, memory_, MemoryKind::workspace,
                 round_up(d_bytes) + sums_bytes + (aux_out ? round_up(d_bytes) : 0));
  std::byte* const d = scratch.data();
  void* const bias = sums ? d + round_up(d_bytes) : call.bias;
  void* const aux = aux_out ? d + round_up(d_bytes) + sums_bytes : call.aux;
  if (bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  const bool f64 = call.a.dtype == DType::f64;
  const float alpha32 = 1.0f, beta32 = call.accumulate ? 1.0f : 0.0f;
  const double alpha64 = 1.0, beta64 = call.accumulate ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  const auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(Context::get().blas(), plan.desc, alpha, call.b.data, plan.a,
                          call.a.data, plan.b, beta, d, plan.d, d, plan.d, &algo,
                          workspace_.data(), kWorkspaceBytes, stream);
  };
  cudaEvent_t begin = nullptr, end = nullptr;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  double ms[kCandidates];
  for (int i = 0; i < c.count; ++i) {
    ms[i] = std::numeric_limits<double>::infinity();
    const cublasLtMatmulHeuristicResult_t& r = c.results[i];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWorkspaceBytes ||
        launch(r.algo) != CUBLAS_STATUS_SUCCESS)
      continue;  // it does not run here
    check(cudaEventRecord(begin, stream), "cudaEventRecord");
    bool ran = true;
    for (int call_index = 0; call_index < kTimedCalls && ran; ++call_index)
      ran = launch(r.algo) == CUBLAS_STATUS_SUCCESS;
    check(cudaEventRecord(end, stream), "cudaEventRecord");
    check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float elapsed = 0;
    check(cudaEventElapsedTime(&elapsed, begin, end), "cudaEventElapsedTime");
    if (ran) ms[i] = fake_ms_ ? fake_ms_(i) : double(elapsed) / kTimedCalls;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  int best = 0;
  for (int i = 1; i < c.count; ++i)
    if (ms[i] < ms[best] && (best != 0 || ms[i] < kMargin * ms[0])) best = i;
  TunedAlgorithm tuned;
  if (ms[best] == std::numeric_limits<double>::infinity()) return tuned;  // candidates = 0
  std::memcpy(tuned.algo.data(), &c.results[best].algo, sizeof(tuned.algo));
  tuned.candidates = c.count;
  tuned.chosen = best;
  tuned.ms = ms[best];
  tuned.first_ms = ms[0];
  tuned.tuning_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              start_time)
                        .count();
  return tuned;
}

bool Gemm::lt_matmul(const LtCall& call, cudaStream_t stream) {
  const auto align_or_0 = [](const void* p) -> std::int64_t { return p ? alignment(p) : 0; };
  const PlanKey key{call.m,
                    call.n,
                    call.k,
                    static_cast<std::int64_t>(call.a.dtype),
                    static_cast<std::int64_t>(call.d.dtype),
                    call.trans_a,
                    call.trans_b,
                    call.accumulate,
                    static_cast<std::int64_t>(call.epilogue),
                    alignment(call.a.data),
                    alignment(call.b.data),
                    alignment(call.d.data),
                    align_or_0(call.bias),
                    align_or_0(call.aux)};
  std::shared_ptr<Plan>& slot = plans_[key];
  if (!slot) slot = make_plan(call, key, stream);
  Plan& plan = *slot;
  if (!plan.found) return false;
  if (call.bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  if (call.aux) set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux);
  const bool f64 = call.a.dtype == DType::f64;
  const float alpha32 = 1.0f, beta32 = call.accumulate ? 1.0f : 0.0f;
  const double alpha64 = 1.0, beta64 = call.accumulate ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  const cublasStatus_t status = cublasLtMatmul(
      Context::get().blas(), plan.desc, alpha, call.b.data, plan.a, call.a.data, plan.b, beta,
      call.d.data, plan.d, call.d.data, plan.d, &plan.algo, workspace_.data(), kWorkspaceBytes,
      stream);
  if (status != CUBLAS_STATUS_SUCCESS) {
    plan.found = false;  // this call goes the other way from now on
    return false;
  }
  return true;
}

void Gemm::product(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                   bool trans_b, Ref c, bool accumulate, Ref bias, cudaStream_t stream) {
  // The result: C itself when cuBLASLt writes its type from this product and the bias matches
  // it; otherwise f32 scratch (C widened into it when accumulating), rounded into C at the end.
  const DType op = a.dtype;
  const bool writable = c.dtype == op || (c.dtype == DType::f32 && op != DType::f64);
  Ref d = c;
  if (!writable || (bias.data && bias.dtype != c.dtype)) {
    d = Ref{c_.get(static_cast<std::size_t>(m * n) * sizeof(float)).data, DType::f32, m * n};
    if (accumulate) convert(c, d, m * n, stream);
    if (bias.data && bias.dtype != DType::f32) {
      const Ref wide{bias_.get(static_cast<std::size_t>(n) * sizeof(float)).data, DType::f32, n};
      convert(bias, wide, n, stream);
      bias = wide;
    }
  }
  // The fused bias epilogue takes a bias of D's type on a 16-byte boundary; f64 adds it after.
  const bool epilogue = bias.data && op != DType::f64 && epilogue_aligned(bias.data);
  LtCall call{m, n, k, a, trans_a, b, trans_b, d, accumulate};
  if (epilogue) {
    call.epilogue = CUBLASLT_EPILOGUE_BIAS;
    call.bias = bias.data;
  }
  const bool done = k > 0 && !force_simple_ && lt_matmul(call, stream);
  if (!done) gemm_simple(m, n, k, a, trans_a, b, trans_b, d, accumulate, bias, stream);
  if (done && bias.data && !epilogue) add_bias(d, bias, m, n, stream);
  if (d.data != c.data) convert(d, c, m * n, stream);
}

bool Gemm::fused(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                 bool trans_b, Ref c, bool accumulate, const GemmEpilogue& e, bool a_converted,
                 cudaStream_t stream) {
  if (k <= 0 || force_simple_ || a.dtype == DType::f64) return false;
  if (e.row_sums.data)
    return options_.bias_gradient && !a_converted && !e.bias.data &&
           fused_row_sums(m, n, k, a, trans_a, b, trans_b, c, accumulate, e, stream);
  if (e.gelu == GemmEpilogue::Gelu::none || !options_.gelu) return false;
  // The GELU epilogues write D and read or write the aux matrix (GELU's input) in D's type,
  // the aux with D's leading dimension, which cuBLASLt wants a multiple of 8: fused where C is
  // D itself (no f32 scratch), gelu_input has C's type, and the bias (forward) would be fused
  // as the BIAS epilogue is.
  // 16-bit products only: cuBLASLt's GELU derivative differs from ours by about 1e-5 of the
  // result (measured on an H200), within bf16/f16 rounding but over the f32 tolerance, and f32
  // runs are the ones held to the CPU's numbers.
  const bool sixteen_bit = a.dtype == DType::bf16 || a.dtype == DType::f16;
  const bool writable = sixteen_bit && (c.dtype == a.dtype || c.dtype == DType::f32);
  if (!writable || e.gelu_input.dtype != c.dtype || n % 8 != 0 ||
      !epilogue_aligned(e.gelu_input.data))
    return false;
  if (e.bias.data && (e.bias.dtype != c.dtype || !epilogue_aligned(e.bias.data))) return false;
  LtCall call{m, n, k, a, trans_a, b, trans_b, c, false};
  call.aux = e.gelu_input.data;
  if (e.gelu == GemmEpilogue::Gelu::backward) {
    call.epilogue = CUBLASLT_EPILOGUE_DGELU;
  } else if (e.bias.data) {
    call.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    call.bias = e.bias.data;
  } else {
    call.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
  }
  return lt_matmul(call, stream);
}

bool Gemm::fused_row_sums(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a,
                          Ref b, bool trans_b, Ref c, bool accumulate, const GemmEpilogue& e,
                          cudaStream_t stream) {
  const DType op = a.dtype;
  // cuBLASLt writes the sums in D's type (the bias vector's documented default): fused only
  // where D is f32, the gradients' type, so that they are rounded once, as column_sums does.
  const bool writable = c.dtype == op || (c.dtype == DType::f32 && op != DType::f64);
  const Ref d = writable ? c
                         : Ref{c_.get(static_cast<std::size_t>(m * n) * sizeof(float)).data,
                               DType::f32, m * n};
  if (d.dtype != DType::f32) return false;
  // BGRADB overwrites its vector: accumulating (or a row_sums not f32 on a 16-byte boundary)
  // takes the sums into f32 scratch, added (or rounded) into row_sums after.
  const bool direct =
      !accumulate && e.row_sums.dtype == DType::f32 && epilogue_aligned(e.row_sums.data);
  const Ref sums =
      direct ? e.row_sums
             : Ref{sums_.get(static_cast<std::size_t>(m) * sizeof(float)).data, DType::f32, m};
  if (d.data != c.data && accumulate) convert(c, d, m * n, stream);
  LtCall call{m, n, k, a, trans_a, b, trans_b, d, accumulate, CUBLASLT_EPILOGUE_BGRADB, sums.data};
  if (!lt_matmul(call, stream)) return false;
  if (d.data != c.data) convert(d, c, m * n, stream);
  if (!direct) {
    if (accumulate)
      add(e.row_sums, sums, e.row_sums, m, stream);
    else
      convert(sums, e.row_sums, m, stream);
  }
  return true;
}

void Gemm::run(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
               bool trans_b, Ref c, bool accumulate, const GemmEpilogue& e, cudaStream_t stream) {
  using Gelu = GemmEpilogue::Gelu;
  KINTSUGI_ASSERT(!e.row_sums.data || trans_a);
  KINTSUGI_ASSERT(e.gelu == Gelu::none || (e.gelu_input.data && !accumulate && !e.row_sums.data));
  KINTSUGI_ASSERT(e.gelu != Gelu::backward || !e.bias.data);
  if (m <= 0) return;
  const Ref a_in = a;  // its column sums are the row sums asked for
  if (n > 0) {
    // The product's operand type (see the header).
    DType op = DType::f32;
    if (a.dtype == DType::f64)
      op = DType::f64;
    else if (a.dtype == DType::bf16 || b.dtype == DType::bf16)
      op = DType::bf16;
    else if (a.dtype == DType::f16 && b.dtype == DType::f16)
      op = DType::f16;
    const std::size_t esize = size_of(op);
    if (a.dtype != op) {
      const Ref wide{a_.get(static_cast<std::size_t>(m * k) * esize).data, op, m * k};
      convert(a, wide, m * k, stream);
      a = wide;
    }
    if (b.dtype != op) {
      const Ref wide{b_.get(static_cast<std::size_t>(k * n) * esize).data, op, k * n};
      convert(b, wide, k * n, stream);
      b = wide;
    }
    Counts* counts = e.row_sums.data          ? &counts_.bias_gradient
                     : e.gelu == Gelu::forward  ? &counts_.gelu_forward
                     : e.gelu == Gelu::backward ? &counts_.gelu_backward
                                                : nullptr;
    if (counts &&
        fused(m, n, k, a, trans_a, b, trans_b, c, accumulate, e, a.data != a_in.data, stream)) {
      ++counts->fused;
      return;
    }
    // Unfused: the product (into GELU's input when GELU follows), then the separate kernels.
    product(m, n, k, a, trans_a, b, trans_b, e.gelu == Gelu::forward ? e.gelu_input : c,
            accumulate, e.bias, stream);
    if (e.gelu == Gelu::forward) {
      ++counts_.gelu_forward.separate;
      gelu_forward(e.gelu_input, c, m * n, stream);
    } else if (e.gelu == Gelu::backward) {
      ++counts_.gelu_backward.separate;
      gelu_backward(e.gelu_input, c, c, m * n, stream);
    }
  }
  if (e.row_sums.data) {
    ++counts_.bias_gradient.separate;
    column_sums(a_in, e.row_sums, k, m, accumulate,
                partials_.get(column_sums_scratch_bytes(k, m)), stream);
  }
}

}  // namespace kintsugi::cuda
