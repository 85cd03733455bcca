// GEMM through cuBLASLt (bf16, or E4M3 weights: gemm.h). Row-major
// D[m, n] = A[m, k] · B[n, k]ᵀ is, in cuBLAS's column-major terms, Dᵀ[n, m] = B[n, k] · Aᵀ: B read
// as a column-major k×n matrix (ld = k) transposed, A as a column-major k×m matrix (ld = k)
// untransposed, D as a column-major n×m matrix (ld = n). Descriptors and the heuristic's algorithm
// are cached per shape (handle, m, n, k, types, workspace): the heuristic query costs tens of µs of
// host time, and a decode step of an 8B model makes ~220 GEMM calls in
// ~4 ms of GPU time — uncached, the host would be the bottleneck.
#include <cublasLt.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_quant.h"
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

// What one cuBLASLt call multiplies: the weights' and activations' type
// (both bf16, or both E4M3) and D's.
struct LtTypes {
  cudaDataType_t in;
  cudaDataType_t d;
};

// Builds the descriptors of g's shape and asks the heuristic for an algorithm.
cublasStatus_t make_plan(const GemmArgs& g, LtTypes t, Plan& p) {
  LtCall& c = p.c;
  cublasStatus_t st;
  if ((st = cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) !=
      CUBLAS_STATUS_SUCCESS)
    return st;
  // The "TN" layout, the one FP8 requires too.
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  // "A" of cuBLAS is our B (weights), "B" of cuBLAS is our A (activations).
  if ((st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans,
                                           sizeof trans)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                           sizeof no_trans)) != CUBLAS_STATUS_SUCCESS)
    return st;
  if ((st = cublasLtMatrixLayoutCreate(&c.a, t.in, uint64_t(g.k), uint64_t(g.n), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.b, t.in, uint64_t(g.k), uint64_t(g.m), g.k)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&c.d, t.d, uint64_t(g.n), uint64_t(g.m), g.n)) !=
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

using PlanKey = std::tuple<cublasLtHandle_t, int64_t, int64_t, int64_t, int, int, size_t>;

// Bounded: prefill makes a shape per token count; past the bound a shape is
// planned per call (correct, slower) rather than the cache growing forever.
constexpr size_t kMaxPlans = 4096;

std::mutex plans_mu;
std::map<PlanKey, Plan>& plans() {
  static auto* m = new std::map<PlanKey, Plan>;  // never destroyed: no exit-order issues
  return *m;
}

// D = alpha · (b-side "A" · a-side "B") + beta · D through the cached plan
// of (g's shape, types t). a and d are what cuBLASLt reads and writes.
cudaError_t lt_matmul(const GemmArgs& g, LtTypes t, const void* a, void* d, float alpha, float beta,
                      cudaStream_t stream) {
  const PlanKey key{g.handle, g.m, g.n, g.k, int(t.in), int(t.d), g.workspace_bytes};
  const Plan* plan = nullptr;
  Plan uncached;
  {
    std::lock_guard<std::mutex> lock(plans_mu);
    auto it = plans().find(key);
    if (it != plans().end()) plan = &it->second;
  }
  if (!plan) {
    Plan fresh;
    cublasStatus_t st = make_plan(g, t, fresh);
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
  cublasStatus_t st = cublasLtMatmul(g.handle, c.op, &alpha, g.b, c.a, a, c.b, &beta, d, c.d, d,
                                     c.d, &plan->algo, g.workspace, g.workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(g, st);
  return cudaSuccess;
}

// E4M3 weights, more rows than the skinny kernel takes: A quantised per
// row, E4M3 x E4M3 into the f32 product, then the scales (gemm.h).
cudaError_t gemm_fp8(const GemmArgs& g, cudaStream_t stream) {
  const uint64_t m = uint64_t(g.m), n = uint64_t(g.n), k = uint64_t(g.k);
  const bool in_place = !g.fp8.prod && g.beta == 0.f && g.out_type == GemmOut::kF32;
  float* prod = in_place ? static_cast<float*>(g.d) : g.fp8.prod;
  if (g.k % 16 != 0 || g.n % 4 != 0 || !g.fp8.a || !g.fp8.a_scale || !prod ||
      g.fp8.a_bytes < m * k || g.fp8.a_scale_bytes < 4 * m ||
      (!in_place && g.fp8.prod_bytes < 4 * m * n))
    return cudaErrorInvalidValue;
  QuantizeRowsFp8Args q;
  q.x = g.a;
  q.n_rows = g.m;
  q.n_cols = g.k;
  q.q = g.fp8.a;
  q.scale = g.fp8.a_scale;
  if (cudaError_t e = launch_quantize_rows_fp8(q, stream); e != cudaSuccess) return e;
  if (cudaError_t e =
          lt_matmul(g, LtTypes{CUDA_R_8F_E4M3, CUDA_R_32F}, g.fp8.a, prod, 1.f, 0.f, stream);
      e != cudaSuccess)
    return e;
  Fp8RescaleArgs r;
  r.prod = prod;  // in place: each element read, then written, by one thread
  r.row_scale = g.fp8.a_scale;
  r.col_scale = g.b_scale;
  r.m = g.m;
  r.n = g.n;
  r.alpha = g.alpha;
  r.beta = g.beta;
  r.d = g.d;
  r.d_bf16 = g.out_type == GemmOut::kBF16;
  return launch_fp8_rescale(r, stream);
}

}  // namespace

bool gemm_skinny_enabled() {
  static const bool on = std::getenv("KVASIR_CUDA_NO_GEMV") == nullptr;
  return on;
}

cudaError_t launch_gemm(const GemmArgs& g, cudaStream_t stream) {
  if (g.cublas_status) *g.cublas_status = CUBLAS_STATUS_SUCCESS;
  if (g.m < 0 || g.n < 0 || g.k < 0) return cudaErrorInvalidValue;
  if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX) return cudaErrorInvalidValue;
  if (g.out_type != GemmOut::kF32 && g.out_type != GemmOut::kBF16) return cudaErrorInvalidValue;
  if (g.b_type != GemmWeight::kBF16 && g.b_type != GemmWeight::kE4M3) return cudaErrorInvalidValue;
  if (g.m == 0 || g.n == 0) return cudaSuccess;
  if (g.handle == nullptr || g.a == nullptr || g.b == nullptr || g.d == nullptr)
    return cudaErrorInvalidValue;
  if (g.workspace_bytes > 0 && g.workspace == nullptr) return cudaErrorInvalidValue;
  if (g.b_type == GemmWeight::kE4M3 && g.b_scale == nullptr) return cudaErrorInvalidValue;

  // 1..4 rows (decode at small batch): the weights' bandwidth is the whole
  // cost and the skinny kernel streams them faster than cuBLASLt's choice.
  // KVASIR_CUDA_NO_GEMV=1 turns it off (bench/gpu compares the two).
  if (gemm_skinny_enabled() && gemv_applies(g)) return launch_gemv(g, stream);
  if (g.b_type == GemmWeight::kE4M3) return gemm_fp8(g, stream);
  const LtTypes t{CUDA_R_16BF, g.out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF};
  return lt_matmul(g, t, g.a, g.d, g.alpha, g.beta, stream);
}

}  // namespace kvasir::cuda
