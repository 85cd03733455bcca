// bf16 GEMM through cuBLASLt. Row-major D[m, n] = A[m, k] · B[n, k]ᵀ is, in
// cuBLAS's column-major terms, Dᵀ[n, m] = B[n, k] · Aᵀ: B read as a
// column-major k×n matrix (ld = k) transposed, A as a column-major k×m
// matrix (ld = k) untransposed, D as a column-major n×m matrix (ld = n).
// Descriptors and the heuristic's algorithm are cached per shape (handle,
// m, n, k, output type, workspace): the heuristic query costs tens of µs of
// host time, and a decode step of an 8B model makes ~220 GEMM calls in
// ~4 ms of GPU time — uncached, the host would be the bottleneck.
#include <cublasLt.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"

namespace kvasir::cuda {
namespace {

// Owns the cuBLASLt descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  void swap(LtCall& o) {
    std::swap(op, o.op);
    std::swap(a, o.a);
    std::swap(b, o.b);
    std::swap(d, o.d);
    std::swap(pref, o.pref);
  }
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

// One shape's descriptors and algorithm, built once.
struct Plan {
  LtCall c;
  cublasLtMatmulAlgo_t algo{};
};

// Builds the descriptors of g's shape and asks the heuristic for an algorithm.
cublasStatus_t make_plan(const GemmArgs& g, Plan& p) {
  const cudaDataType_t d_type = g.out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  LtCall& c = p.c;
  cublasStatus_t st;
  if ((st = cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) !=
      CUBLAS_STATUS_SUCCESS)
    return st;
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  // "A" of cuBLAS is our B (weights), "B" of cuBLAS is our A (activations).
  if ((st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans,
                                           sizeof trans)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                           sizeof no_trans)) != CUBLAS_STATUS_SUCCESS)
    return st;
  if ((st = cublasLtMatrixLayoutCreate(&c.a, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.n), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.b, CUDA_R_16BF, uint64_t(g.k), uint64_t(g.m), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.d, d_type, uint64_t(g.n), uint64_t(g.m), g.n)) !=
          CUBLAS_STATUS_SUCCESS)
    return st;
  if ((st = cublasLtMatmulPreferenceCreate(&c.pref)) != CUBLAS_STATUS_SUCCESS) return st;
  const size_t ws = g.workspace_bytes;
  if ((st = cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws)) != CUBLAS_STATUS_SUCCESS)
    return st;
  cublasLtMatmulHeuristicResult_t heur{};
  int n_found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(g.handle, c.op, c.a, c.b, c.d, c.d, c.pref, 1, &heur,
                                      &n_found);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (n_found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.algo = heur.algo;
  return CUBLAS_STATUS_SUCCESS;
}

using PlanKey = std::tuple<cublasLtHandle_t, int64_t, int64_t, int64_t, int, size_t>;

// Bounded: prefill makes a shape per token count; past the bound a shape is
// planned per call (correct, slower) rather than the cache growing forever.
constexpr size_t kMaxPlans = 4096;

std::mutex plans_mu;
std::map<PlanKey, Plan>& plans() {
  static auto* m = new std::map<PlanKey, Plan>;  // never destroyed: no exit-order issues
  return *m;
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

  // 1..4 rows (decode at small batch): the weights' bandwidth is the whole
  // cost and the skinny kernel streams them faster than cuBLASLt's choice.
  // KVASIR_CUDA_NO_GEMV=1 turns it off (bench/gpu compares the two).
  static const bool no_gemv = std::getenv("KVASIR_CUDA_NO_GEMV") != nullptr;
  if (!no_gemv && gemv_applies(g)) return launch_gemv(g, stream);

  const PlanKey key{g.handle, g.m, g.n, g.k, int(g.out_type), g.workspace_bytes};
  const Plan* plan = nullptr;
  Plan uncached;
  {
    std::lock_guard<std::mutex> lock(plans_mu);
    auto it = plans().find(key);
    if (it != plans().end()) plan = &it->second;
  }
  if (!plan) {
    Plan fresh;
    cublasStatus_t st = make_plan(g, fresh);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(g, st);
    std::lock_guard<std::mutex> lock(plans_mu);
    if (plans().size() < kMaxPlans) {
      auto [it, inserted] = plans().try_emplace(key);
      if (inserted) {
        it->second.c.swap(fresh.c);
        it->second.algo = fresh.algo;
      }
      plan = &it->second;  // entries never move or go away (std::map)
    } else {
      uncached.c.swap(fresh.c);
      uncached.algo = fresh.algo;
      plan = &uncached;
    }
  }
  const LtCall& c = plan->c;
  cublasStatus_t st =
      cublasLtMatmul(g.handle, c.op, &g.alpha, g.b, c.a, g.a, c.b, &g.beta, g.d, c.d, g.d, c.d,
                     &plan->algo, g.workspace, g.workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(g, st);
  return cudaSuccess;
}

}  // namespace kvasir::cuda
