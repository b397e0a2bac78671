// cuBLASLt's stand-in for the emulator (cublasLt.h): a reference column-major matmul that follows
// the library's documented semantics, and checks of what the real library would reject.
#include "cublasLt.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatmulDescEmu {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // the bias (BIAS) or the bias gradient written (BGRADB)
  const void* aux = nullptr;   // GELU's input: written (GELU_AUX*) or read (DGELU)
  std::int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutEmu {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
struct cublasLtMatmulPreferenceEmu {
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

std::uint64_t products = 0;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "CUDA emulator (cuBLASLt): %s\n", message.c_str());
  std::abort();
}

double get(const void* p, cudaDataType_t t, std::size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0;
}

void put(void* p, cudaDataType_t t, std::size_t i, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; return;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); return;
  }
}

// The output types cuBLASLt offers for an operand type (f32 compute unless all f64).
bool supported(cudaDataType_t ab, cudaDataType_t d, cublasComputeType_t compute) {
  if (ab == CUDA_R_64F) return d == CUDA_R_64F && compute == CUBLAS_COMPUTE_64F;
  if (compute != CUBLAS_COMPUTE_32F) return false;
  if (ab == CUDA_R_32F) return d == CUDA_R_32F;
  return d == ab || d == CUDA_R_32F;  // bf16 or f16 operands
}

std::uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// op(X) of a layout: rows x cols after the transpose.
void op_dims(const cublasLtMatrixLayoutEmu& l, cublasOperation_t op, std::uint64_t& rows,
             std::uint64_t& cols) {
  rows = op == CUBLAS_OP_N ? l.rows : l.cols;
  cols = op == CUBLAS_OP_N ? l.cols : l.rows;
}

// The epilogues implemented here, and what each needs (see the header).
bool implemented(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_BGRADB:
      return true;
  }
  return false;
}
bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool adds_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// NOT_SUPPORTED for what the emulator does not implement: epilogues beyond the list (and any
// epilogue of an f64 product); INVALID_VALUE for an aux matrix without its documented leading
// dimension (a multiple of 8, at least D's rows).
cublasStatus_t check_operation(const cublasLtMatmulDescEmu& desc, const cublasLtMatrixLayoutEmu& a,
                               const cublasLtMatrixLayoutEmu& b, const cublasLtMatrixLayoutEmu& c,
                               const cublasLtMatrixLayoutEmu& d) {
  if (a.type != b.type || c.type != d.type || !supported(a.type, d.type, desc.compute))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!implemented(desc.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc.compute == CUBLAS_COMPUTE_64F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (uses_aux(desc.epilogue) &&
      (desc.aux_ld % 8 != 0 || desc.aux_ld < static_cast<std::int64_t>(d.rows)))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// What an algorithm is tied to (algo.data[7]): the types and the epilogue it was chosen for.
std::uint64_t tag(const cublasLtMatmulDescEmu& desc, const cublasLtMatrixLayoutEmu& a,
                  const cublasLtMatrixLayoutEmu& d) {
  return 0x6b7400000000ull | std::uint64_t(desc.compute) << 24 | std::uint64_t(a.type) << 16 |
         std::uint64_t(d.type) << 12 | std::uint64_t(desc.epilogue);
}

// GELU, tanh approximation, in f32 (as a GPU's epilogue computes it), and its derivative.
float gelu(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}
float gelu_grad(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

}  // namespace

namespace cuda_emu {
std::uint64_t blas_products() { return products; }
}  // namespace cuda_emu

std::size_t cublasLtGetVersion() { return 1; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescEmu{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* value, std::size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (bytes != sizeof(int)) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) =
          *static_cast<const cublasOperation_t*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(int)) return CUBLAS_STATUS_INVALID_VALUE;
      desc->epilogue = *static_cast<const cublasLtEpilogue_t*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      desc->bias = *static_cast<const void* const*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      desc->aux = *static_cast<const void* const*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (bytes != sizeof(std::int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      desc->aux_ld = *static_cast<const std::int64_t*>(value);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols,
                                          std::int64_t ld) {
  // Column-major: the leading dimension spans at least a column.
  if (ld < static_cast<std::int64_t>(rows) || ld <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutEmu{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceEmu;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* value, std::size_t bytes) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (bytes != sizeof(std::uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    pref->workspace = *static_cast<const std::uint64_t*>(value);
    return CUBLAS_STATUS_SUCCESS;
  }
  const int k = attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
  if (k < 0 || k > 3 || bytes != sizeof(std::uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  pref->align[k] = *static_cast<const std::uint32_t*>(value);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t* results,
    int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (const cublasStatus_t s = check_operation(*desc, *a, *b, *c, *d); s != CUBLAS_STATUS_SUCCESS)
    return s;
  // The bias and aux pointers are not dereferenced here, but their alignment binds the
  // algorithms returned, as the alignments promised for the matrices do.
  const std::uint64_t bias_align = desc->bias ? alignment(desc->bias) : 0;
  const std::uint64_t aux_align = desc->aux ? alignment(desc->aux) : 0;
  const int count = requested < kEmulatedAlgorithms ? requested : kEmulatedAlgorithms;
  for (int r = 0; r < count; ++r) {
    results[r] = {};
    for (int k = 0; k < 4; ++k) results[r].algo.data[k] = pref->align[k];
    results[r].algo.data[4] = bias_align;
    results[r].algo.data[5] = aux_align;
    results[r].algo.data[6] = static_cast<std::uint64_t>(r);  // its k products in r + 1 pieces
    results[r].algo.data[7] = tag(*desc, *a, *d);
  }
  *returned = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
  if (const cublasStatus_t s = check_operation(*desc, *a, *b, *c, *d); s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (algo->data[7] != tag(*desc, *a, *d) || algo->data[6] >= kEmulatedAlgorithms)
    return CUBLAS_STATUS_INVALID_VALUE;  // an algorithm of another operation
  result->workspaceSize = 0;
  result->state = CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t al, const void* b,
                              cublasLtMatrixLayout_t bl, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cl, void* d, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, std::size_t,
                              cudaStream_t) {
  std::uint64_t m, k, k2, n;
  op_dims(*al, desc->trans_a, m, k);
  op_dims(*bl, desc->trans_b, k2, n);
  if (k != k2 || dl->rows != m || dl->cols != n || cl->rows != dl->rows ||
      cl->cols != dl->cols || cl->ld != dl->ld)
    die("matmul layouts that do not fit: op(A) " + std::to_string(m) + "x" + std::to_string(k) +
        ", op(B) " + std::to_string(k2) + "x" + std::to_string(n) + ", D " +
        std::to_string(dl->rows) + "x" + std::to_string(dl->cols));
  if (check_operation(*desc, *al, *bl, *cl, *dl) != CUBLAS_STATUS_SUCCESS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo->data[7] != tag(*desc, *al, *dl) || algo->data[6] >= kEmulatedAlgorithms)
    die("an algorithm the heuristic gave for another operation (types or epilogue)");
  const void* pointers[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i)
    if (alignment(pointers[i]) < algo->data[i])
      die("a matrix less aligned than promised to the heuristic (misaligned address on a GPU)");
  const cublasLtEpilogue_t epilogue = desc->epilogue;
  const bool bias = adds_bias(epilogue), bgrad = epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const bool aux = uses_aux(epilogue);
  if ((bias || bgrad) && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (aux && !desc->aux) return CUBLAS_STATUS_INVALID_VALUE;
  if ((bias || bgrad) && alignment(desc->bias) < algo->data[4])
    die("a bias vector less aligned than the one the heuristic saw");
  if (aux && alignment(desc->aux) < algo->data[5])
    die("an aux matrix less aligned than the one the heuristic saw");
  const bool f64 = desc->compute == CUBLAS_COMPUTE_64F;
  const double al_v = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be_v = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  // Where alpha and C enter a GELU or a gradient epilogue is not emulated: the backend never
  // scales these, nor accumulates through GELU.
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS && al_v != 1)
    die("alpha != 1 with a GELU or bias-gradient epilogue (not emulated)");
  if (aux && be_v != 0) die("beta != 0 with a GELU epilogue (not emulated)");
  auto at = [](const cublasLtMatrixLayoutEmu& l, cublasOperation_t op, std::uint64_t i,
               std::uint64_t j) {  // element (i, j) of op(X), column-major storage
    return op == CUBLAS_OP_N ? i + j * l.ld : j + i * l.ld;
  };
  // op(A) by rows and op(B) by columns, widened once, so the products walk contiguous memory.
  std::vector<double> a_rows(m * k), b_cols(k * n);
  for (std::uint64_t i = 0; i < m; ++i)
    for (std::uint64_t p = 0; p < k; ++p) a_rows[i * k + p] = get(a, al->type, at(*al, desc->trans_a, i, p));
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t p = 0; p < k; ++p) b_cols[j * k + p] = get(b, bl->type, at(*bl, desc->trans_b, p, j));
  // The algorithm's pieces of k, each summed from zero, then added in order (a split-K).
  const std::uint64_t pieces = algo->data[6] + 1;
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      const double* x = &a_rows[i * k];
      const double* y = &b_cols[j * k];
      double sum = 0;
      float sum32 = 0;
      for (std::uint64_t s = 0; s < pieces; ++s) {
        const std::uint64_t p0 = k * s / pieces, p1 = k * (s + 1) / pieces;
        if (f64) {
          double acc = 0;
          for (std::uint64_t p = p0; p < p1; ++p) acc += x[p] * y[p];
          sum = s == 0 ? acc : sum + acc;
        } else {  // f32 compute: fused multiply-adds in f32, as the GPU's tensor or FMA units
          float acc = 0;
          for (std::uint64_t p = p0; p < p1; ++p)
            acc = std::fma(static_cast<float>(x[p]), static_cast<float>(y[p]), acc);
          sum32 = s == 0 ? acc : sum32 + acc;
        }
      }
      if (!f64) sum = sum32;
      double v = al_v * sum;
      if (be_v != 0) v += be_v * get(c, cl->type, i + j * cl->ld);
      if (bias) v += get(desc->bias, dl->type, i);
      if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        put(const_cast<void*>(desc->aux), dl->type, i + j * desc->aux_ld, v);
        v = gelu(static_cast<float>(v));
      } else if (epilogue == CUBLASLT_EPILOGUE_DGELU) {
        v = static_cast<float>(v) *
            gelu_grad(static_cast<float>(get(desc->aux, dl->type, i + j * desc->aux_ld)));
      }
      put(d, dl->type, i + j * dl->ld, v);
    }
  if (bgrad)  // the sums over k of op(B)'s columns, in f32, in D's type
    for (std::uint64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (std::uint64_t p = 0; p < k; ++p) acc += static_cast<float>(b_cols[j * k + p]);
      put(const_cast<void*>(desc->bias), dl->type, j, acc);
    }
  ++products;
  return CUBLAS_STATUS_SUCCESS;
}
