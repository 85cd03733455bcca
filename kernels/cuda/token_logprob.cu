// Chosen-token logprob (kernels/cuda/token_logprob.h): one block per row,
// two passes over the row (max, then the sum of exp(x - max) in double as the
// CPU sampler sums), lane 0 writes x[token] - (max + log(sum)).
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/token_logprob.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sanitize(float x) {
  if (isnan(x)) return -INFINITY;
  if (x == INFINITY) return FLT_MAX;
  return x;
}

__global__ void token_logprob_kernel(const float* logits, const int32_t* tokens, int32_t vocab,
                                     float* out) {
  __shared__ float smax[32];
  __shared__ double ssum[32];
  const float* x = logits + int64_t(blockIdx.x) * vocab;
  float m = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, sanitize(x[i]));
  m = detail::warp_max(m);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (lane == 0) smax[warp] = m;
  __syncthreads();
  m = lane < n_warps ? smax[lane] : -INFINITY;
  m = detail::warp_max(m);
  double s = 0.0;
  if (m != -INFINITY)
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) s += exp(double(sanitize(x[i]) - m));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(detail::kFullMask, s, o);
  if (lane == 0) ssum[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < n_warps; ++w) total += ssum[w];
    const int32_t t = tokens[blockIdx.x];
    if (m == -INFINITY)
      out[blockIdx.x] = -INFINITY;
    else if (t < 0 || t >= vocab)
      out[blockIdx.x] = __int_as_float(0x7fc00000);
    else
      out[blockIdx.x] = float(double(sanitize(x[t])) - (double(m) + log(total)));
  }
}

}  // namespace

cudaError_t launch_token_logprob(const TokenLogprobArgs& a, cudaStream_t stream) {
  if (a.n_rows < 0 || a.vocab <= 0) return cudaErrorInvalidValue;
  if (a.n_rows == 0) return cudaSuccess;
  if (a.logits == nullptr || a.tokens == nullptr || a.logprobs == nullptr)
    return cudaErrorInvalidValue;
  token_logprob_kernel<<<a.n_rows, kThreads, 0, stream>>>(a.logits, a.tokens, a.vocab, a.logprobs);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
