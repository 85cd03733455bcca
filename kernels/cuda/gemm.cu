// bf16 GEMM through cuBLASLt. Row-major D[m, n] = A[m, k] · B[n, k]ᵀ is, in
// cuBLAS's column-major terms, Dᵀ[n, m] = B[n, k] · Aᵀ: B read as a
// column-major k×n matrix (ld = k) transposed, A as a column-major k×m
// matrix (ld = k) untransposed, D as a column-major n×m matrix (ld = n).
// Layouts and the algorithm heuristic are set up per call: a few µs of host
// work, acceptable until an executor caches them per shape.
#include <cublasLt.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"

namespace kvasir::cuda {
namespace {

// Owns the cuBLASLt descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cudaError_t fail(const GemmArgs& args, cublasStatus_t st) {
  if (args.cublas_status) *args.cublas_status = st;
  return st == CUBLAS_STATUS_NOT_SUPPORTED ? cudaErrorNotSupported : cudaErrorUnknown;
}

}  // namespace

cudaError_t launch_gemm(const GemmArgs& g, cudaStream_t stream) {
  if (g.cublas_status) *g.cublas_status = CUBLAS_STATUS_SUCCESS;
  if (g.m < 0 || g.n < 0 || g.k < 0) return cudaErrorInvalidValue;
  if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX) return cudaErrorInvalidValue;
  if (g.out_type != GemmOut::kF32 && g.out_type != GemmOut::kBF16) return cudaErrorInvalidValue;
  if (g.m == 0 || g.n == 0) return cudaSuccess;
  if (g.handle == nullptr || g.a == nullptr || g.b == nullptr || g.d == nullptr)
    return cudaErrorInvalidValue;
  if (g.workspace_bytes > 0 && g.workspace == nullptr) return cudaErrorInvalidValue;

  const cudaDataType_t d_type = g.out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  LtCall c;
  cublasStatus_t st;
  if ((st = cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) !=
      CUBLAS_STATUS_SUCCESS)
    return fail(g, st);
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  // "A" of cuBLAS is our B (weights), "B" of cuBLAS is our A (activations).
  if ((st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans,
                                           sizeof trans)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                           sizeof no_trans)) != CUBLAS_STATUS_SUCCESS)
    return fail(g, st);
  if ((st = cublasLtMatrixLayoutCreate(&c.a, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.n), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.b, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.m), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.d, d_type, uint64_t(g.n), uint64_t(g.m), g.n)) !=
          CUBLAS_STATUS_SUCCESS)
    return fail(g, st);
  if ((st = cublasLtMatmulPreferenceCreate(&c.pref)) != CUBLAS_STATUS_SUCCESS) return fail(g, st);
  const size_t ws = g.workspace_bytes;
  if ((st = cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws)) != CUBLAS_STATUS_SUCCESS)
    return fail(g, st);
  cublasLtMatmulHeuristicResult_t heur{};
  int n_found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(g.handle, c.op, c.a, c.b, c.d, c.d, c.pref, 1, &heur,
                                      &n_found);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(g, st);
  if (n_found == 0) return fail(g, CUBLAS_STATUS_NOT_SUPPORTED);
  st = cublasLtMatmul(g.handle, c.op, &g.alpha, g.b, c.a, g.a, c.b, &g.beta, g.d, c.d, g.d, c.d,
                      &heur.algo, g.workspace, g.workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(g, st);
  return cudaSuccess;
}

}  // namespace kvasir::cuda
