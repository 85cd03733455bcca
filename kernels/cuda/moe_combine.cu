// MoE combine: one block per token. Thread 0 orders the token's top_k pairs
// by (expert id, j) — an insertion sort of at most kMoeMaxTopK entries —
// then every thread sums its columns in that order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_combine.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(const float* y, int64_t rows, const int32_t* ids, const int32_t* pos,
                       const float* weights, int32_t top_k, int64_t hidden, bool accumulate,
                       float* out, int32_t* error) {
  __shared__ int32_t order_pos[kMoeMaxTopK];
  __shared__ float order_w[kMoeMaxTopK];
  __shared__ int n_terms;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int32_t key[kMoeMaxTopK];
    int m = 0;
    for (int j = 0; j < top_k; ++j) {
      const int32_t p = pos[t * top_k + j];
      if (p < 0) continue;  // dropped by moe_group (flag set there)
      if (p >= rows) {
        detail::set_error(error, kErrorBatch);
        continue;
      }
      // Insert after every entry with a key <= this one: equal experts keep
      // j order.
      const int32_t id = ids[t * top_k + j];
      int at = m;
      while (at > 0 && key[at - 1] > id) {
        key[at] = key[at - 1];
        order_pos[at] = order_pos[at - 1];
        order_w[at] = order_w[at - 1];
        --at;
      }
      key[at] = id;
      order_pos[at] = p;
      order_w[at] = weights[t * top_k + j];
      ++m;
    }
    n_terms = m;
  }
  __syncthreads();
  const int m = n_terms;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < m; ++q)
      acc = __fadd_rn(acc, __fmul_rn(order_w[q], y[int64_t(order_pos[q]) * hidden + c]));
    float* o = out + t * hidden + c;
    *o = accumulate ? __fadd_rn(*o, acc) : acc;
  }
}

}  // namespace

cudaError_t launch_moe_combine(const MoeCombineArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.n > INT32_MAX || a.rows < 0 || a.rows > INT32_MAX || a.hidden < 1)
    return cudaErrorInvalidValue;
  if (a.top_k < 1 || a.top_k > kMoeMaxTopK) return cudaErrorInvalidValue;
  if (a.n > 0 && a.hidden > (int64_t(1) << 50) / a.n) return cudaErrorInvalidValue;
  if (a.rows > 0 && a.hidden > (int64_t(1) << 50) / a.rows) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.ids == nullptr || a.pos == nullptr || a.weights == nullptr || a.out == nullptr ||
      (a.y == nullptr && a.rows > 0))
    return cudaErrorInvalidValue;
  moe_combine_kernel<<<unsigned(a.n), kThreads, 0, stream>>>(
      a.y, a.rows, a.ids, a.pos, a.weights, a.top_k, a.hidden, a.accumulate, a.out, a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
