// FP8 E4M3 rows (kernels/cuda/fp8_quant.h). Quantisation: one block per
// row, a max reduction, then the codes; the float operations are base/fp8's.
// Rescale: one thread per element (grid-stride).
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_quant.h"

namespace kvasir::cuda {
namespace {

constexpr float kE4M3Max = 448.f;

// Max over the block (every thread gets it); scratch: 32 floats of shared
// memory; fmaxf ignores NaN as std::fmax does on the host.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = detail::warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.f;
  return detail::warp_max(v);
}

__global__ void quantize_rows_kernel(const __nv_bfloat16* x, int64_t n_cols, int64_t stride,
                                     uint8_t* q, float* scale) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* xr = x + r * stride;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x)
    amax = fmaxf(amax, fabsf(__bfloat162float(xr[i])));
  amax = block_max(amax, scratch);
  const bool usable = amax > 0.f && isfinite(amax);
  const float inv = usable ? kE4M3Max / amax : 1.f;
  uint8_t* qr = q + r * n_cols;
  for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x)
    qr[i] = __nv_cvt_float_to_fp8(__bfloat162float(xr[i]) * inv, __NV_SATFINITE, __NV_E4M3);
  if (threadIdx.x == 0) scale[r] = usable ? amax / kE4M3Max : 1.f;
}

template <bool kBF16>
__global__ void rescale_kernel(const float* prod, const float* rs, const float* cs, int64_t m,
                               int64_t n, float alpha, float beta, void* d) {
  const int64_t total = m * n;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / n, j = e % n;
    const float v = alpha * (prod[e] * rs[i] * cs[j]);
    if constexpr (kBF16) {
      __nv_bfloat16* dd = static_cast<__nv_bfloat16*>(d);
      dd[e] = __float2bfloat16_rn(beta != 0.f ? v + beta * __bfloat162float(dd[e]) : v);
    } else {
      float* dd = static_cast<float*>(d);
      dd[e] = beta != 0.f ? v + beta * dd[e] : v;
    }
  }
}

}  // namespace

cudaError_t launch_quantize_rows_fp8(const QuantizeRowsFp8Args& a, cudaStream_t stream) {
  const int64_t stride = a.x_stride == 0 ? a.n_cols : a.x_stride;
  if (a.n_rows < 0 || a.n_cols < 0 || stride < a.n_cols) return cudaErrorInvalidValue;
  if (a.n_rows > INT32_MAX) return cudaErrorInvalidValue;
  if (a.n_rows == 0) return cudaSuccess;
  if (a.x == nullptr || a.q == nullptr || a.scale == nullptr) return cudaErrorInvalidValue;
  const int threads = a.n_cols >= 2048 ? 512 : a.n_cols >= 256 ? 256 : 64;
  quantize_rows_kernel<<<unsigned(a.n_rows), threads, 0, stream>>>(a.x, a.n_cols, stride, a.q,
                                                                   a.scale);
  return detail::launch_result();
}

cudaError_t launch_fp8_rescale(const Fp8RescaleArgs& a, cudaStream_t stream) {
  if (a.m < 0 || a.n < 0 || (a.m > 0 && a.n > (int64_t(1) << 50) / a.m))
    return cudaErrorInvalidValue;
  if (a.m == 0 || a.n == 0) return cudaSuccess;
  if (!a.prod || !a.row_scale || !a.col_scale || !a.d) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  const unsigned grid = detail::grid_for(a.m * a.n, kThreads);
  if (a.d_bf16)
    rescale_kernel<true><<<grid, kThreads, 0, stream>>>(a.prod, a.row_scale, a.col_scale, a.m, a.n,
                                                        a.alpha, a.beta, a.d);
  else
    rescale_kernel<false><<<grid, kThreads, 0, stream>>>(a.prod, a.row_scale, a.col_scale, a.m, a.n,
                                                         a.alpha, a.beta, a.d);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
