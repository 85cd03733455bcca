// MoE router top-k: one block per token. Kept simple rather than fast: the
// rank of each expert is counted against all others (O(n_experts²) compares
// per token, shared memory), which is exact and needs no sort.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

// Every thread gets the block's max; `scratch` holds 32 floats.
__device__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = detail::warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : -INFINITY;
  return detail::warp_max(v);
}

// Every thread gets the block's sum (double); `scratch` holds 32 doubles.
__device__ double block_sum_f64(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    moe_route_kernel(const float* logits, int32_t n_experts, int32_t top_k, bool norm_topk,
                     int32_t* ids, float* weights, int32_t* error) {
  __shared__ float l[kMoeMaxExperts];
  __shared__ double chosen_p[kMoeMaxTopK];
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const int64_t t = blockIdx.x;
  const float* row = logits + t * n_experts;
  int32_t* row_ids = ids + t * top_k;
  float* row_w = weights + t * top_k;

  int bad = 0;
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    const float v = row[e];
    l[e] = v;
    bad |= !isfinite(v);
    mx = fmaxf(mx, v);
  }
  if (__syncthreads_or(bad)) {
    // Valid ids with zero weight keep the later kernels' inputs well formed.
    if (threadIdx.x == 0) detail::set_error(error, kErrorRouterLogit);
    for (int j = threadIdx.x; j < top_k; j += blockDim.x) {
      row_ids[j] = j;
      row_w[j] = 0.f;
    }
    return;
  }
  mx = block_max(mx, fscratch);

  double part = 0.0;
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) part += exp(double(l[e]) - mx);
  const double sum = block_sum_f64(part, dscratch);

  // Rank = how many experts come first: a larger logit, or an equal one with
  // a lower id. A strict total order on finite values, so ranks 0..k-1 are
  // each taken exactly once.
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    const float v = l[e];
    int rank = 0;
    for (int f = 0; f < n_experts && rank < top_k; ++f) rank += (l[f] > v) || (l[f] == v && f < e);
    if (rank < top_k) {
      row_ids[rank] = e;
      chosen_p[rank] = exp(double(v) - mx) / sum;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // Summed in j order (descending), as the CPU does.
    double chosen = 0.0;
    for (int j = 0; j < top_k; ++j) chosen += chosen_p[j];
    dscratch[0] = norm_topk ? 1.0 / fmax(chosen, 0x1p-14) : 1.0;
  }
  __syncthreads();
  const double scale = dscratch[0];
  for (int j = threadIdx.x; j < top_k; j += blockDim.x) row_w[j] = float(chosen_p[j] * scale);
}

}  // namespace

cudaError_t launch_moe_route(const MoeRouteArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.n > INT32_MAX) return cudaErrorInvalidValue;
  if (a.n_experts < 1 || a.n_experts > kMoeMaxExperts) return cudaErrorInvalidValue;
  if (a.top_k < 1 || a.top_k > a.n_experts || a.top_k > kMoeMaxTopK) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.logits == nullptr || a.ids == nullptr || a.weights == nullptr) return cudaErrorInvalidValue;
  moe_route_kernel<<<unsigned(a.n), kThreads, 0, stream>>>(a.logits, a.n_experts, a.top_k,
                                                           a.norm_topk, a.ids, a.weights, a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
