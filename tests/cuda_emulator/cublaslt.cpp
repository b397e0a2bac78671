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
  const void* bias = nullptr;
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

}  // namespace

namespace cuda_emu {
std::uint64_t blas_products() { return products; }
}  // namespace cuda_emu

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
  if (a->type != b->type || c->type != d->type || !supported(a->type, d->type, desc->compute))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};
  for (int k = 0; k < 4; ++k) results[0].algo.data[k] = pref->align[k];
  *returned = 1;
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
  if (!supported(al->type, dl->type, desc->compute) || al->type != bl->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const void* pointers[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i)
    if (alignment(pointers[i]) < algo->data[i])
      die("a matrix less aligned than promised to the heuristic (misaligned address on a GPU)");
  const bool f64 = desc->compute == CUBLAS_COMPUTE_64F;
  const double al_v = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be_v = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
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
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      const double* x = &a_rows[i * k];
      const double* y = &b_cols[j * k];
      double sum = 0;
      if (f64) {
        for (std::uint64_t p = 0; p < k; ++p) sum += x[p] * y[p];
      } else {  // f32 compute: fused multiply-adds in f32, as the GPU's tensor or FMA units
        float acc = 0;
        for (std::uint64_t p = 0; p < k; ++p)
          acc = std::fma(static_cast<float>(x[p]), static_cast<float>(y[p]), acc);
        sum = acc;
      }
      double v = al_v * sum;
      if (be_v != 0) v += be_v * get(c, cl->type, i + j * cl->ld);
      if (bias) v += get(desc->bias, dl->type, i);
      put(d, dl->type, i + j * dl->ld, v);
    }
  ++products;
  return CUBLAS_STATUS_SUCCESS;
}
