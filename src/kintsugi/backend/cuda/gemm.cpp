#include "kintsugi/backend/cuda/gemm.hpp"

#include <cublasLt.h>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/backend/cuda/cuda_check.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // what Hopper's kernels want

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

// Descriptors of one shape and its algorithm (cuBLAS is column-major: the row-major product
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. with A and B swapped).
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

Gemm::Gemm(Allocator& allocator, MemoryTracker& memory)
    : workspace_(allocator, memory, MemoryKind::workspace, kWorkspaceBytes),
      a_(allocator, memory),
      b_(allocator, memory),
      c_(allocator, memory),
      bias_(allocator, memory) {}

Gemm::~Gemm() = default;

bool Gemm::lt_matmul(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
                     bool trans_b, Ref d, bool accumulate, Ref bias, cudaStream_t stream) {
  const bool f64 = a.dtype == DType::f64;
  // The fused bias epilogue takes a bias of D's type on a 16-byte boundary; f64 adds it after.
  const bool epilogue = bias.data && !f64 && alignment(bias.data) >= 16;
  const auto key =
      std::make_tuple(m, n, k, static_cast<int>(a.dtype), static_cast<int>(d.dtype), int(trans_a),
                      int(trans_b), int(accumulate), int(epilogue), int(alignment(a.data)),
                      int(alignment(b.data)), int(alignment(d.data)), 0);
  std::shared_ptr<Plan>& slot = plans_[key];
  if (!slot) {
    auto plan = std::make_shared<Plan>();
    const cudaDataType_t ab = cuda_type(a.dtype), dt = cuda_type(d.dtype);
    lt_check(cublasLtMatmulDescCreate(&plan->desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                      f64 ? CUDA_R_64F : CUDA_R_32F),
             "cublasLtMatmulDescCreate");
    // cuBLAS's A is our B and its B our A (see Plan).
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    if (epilogue) set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    lt_check(trans_b ? cublasLtMatrixLayoutCreate(&plan->a, ab, u(k), u(n), k)
                     : cublasLtMatrixLayoutCreate(&plan->a, ab, u(n), u(k), n),
             "cublasLtMatrixLayoutCreate (A)");
    lt_check(trans_a ? cublasLtMatrixLayoutCreate(&plan->b, ab, u(m), u(k), m)
                     : cublasLtMatrixLayoutCreate(&plan->b, ab, u(k), u(m), k),
             "cublasLtMatrixLayoutCreate (B)");
    lt_check(cublasLtMatrixLayoutCreate(&plan->d, dt, u(n), u(m), n),
             "cublasLtMatrixLayoutCreate (D)");
    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const std::uint64_t ws = kWorkspaceBytes;
    const std::uint32_t align_a = alignment(b.data), align_b = alignment(a.data),
                        align_d = alignment(d.data);
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
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(Context::get().blas(), plan->desc, plan->a, plan->b, plan->d,
                                       plan->d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    plan->found = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (plan->found) plan->algo = result.algo;
    slot = std::move(plan);
  }
  Plan& plan = *slot;
  if (!plan.found) return false;
  if (epilogue) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data);
  const float alpha32 = 1.0f, beta32 = accumulate ? 1.0f : 0.0f;
  const double alpha64 = 1.0, beta64 = accumulate ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  const cublasStatus_t status = cublasLtMatmul(
      Context::get().blas(), plan.desc, alpha, b.data, plan.a, a.data, plan.b, beta, d.data, plan.d,
      d.data, plan.d, &plan.algo, workspace_.data(), kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS) {
    plan.found = false;  // this shape goes to gemm_simple from now on
    return false;
  }
  if (bias.data && !epilogue) add_bias(d, bias, m, n, stream);
  return true;
}

void Gemm::run(std::int64_t m, std::int64_t n, std::int64_t k, Ref a, bool trans_a, Ref b,
               bool trans_b, Ref c, bool accumulate, Ref bias, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
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
  // The result: C itself when cuBLASLt writes its type from this product and the bias matches
  // it; otherwise f32 scratch (C widened into it when accumulating), rounded into C at the end.
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
  const bool done = k > 0 && !force_simple_ &&
                    lt_matmul(m, n, k, a, trans_a, b, trans_b, d, accumulate, bias, stream);
  if (!done) gemm_simple(m, n, k, a, trans_a, b, trans_b, d, accumulate, bias, stream);
  if (d.data != c.data) convert(d, c, m * n, stream);
}

}  // namespace kintsugi::cuda
