// Skinny GEMM (kernels/cuda/gemv.h): one warp per output feature n. Each lane
// reads 8 bf16 of the weight row per step (16 bytes, the warp 512 contiguous
// bytes), multiplies them with the same 8 columns of each of the M activation
// rows (small, served from L1/L2), and the warp sums its lanes at the end.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"

namespace kvasir::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 t = __bfloat1622float2(p[j]);
    f[2 * j] = t.x;
    f[2 * j + 1] = t.y;
  }
}

template <int M, bool kBF16Out>
__global__ void gemv_kernel(const __nv_bfloat16* __restrict__ a,
                            const __nv_bfloat16* __restrict__ w, void* d, int64_t n, int64_t k,
                            float alpha, float beta) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + row * k);
  const int64_t k8 = k / 8;
  float acc[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = 0.f;
#pragma unroll 4
  for (int64_t i = lane; i < k8; i += 32) {
    const uint4 wv = __ldg(wr + i);
    float wf[8];
    unpack8(wv, wf);
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      const uint4 av = __ldg(reinterpret_cast<const uint4*>(a + mi * k) + i);
      float af[8];
      unpack8(av, af);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[mi] = fmaf(af[j], wf[j], acc[mi]);
    }
  }
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    float s = acc[mi];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) {
      const int64_t o = int64_t(mi) * n + row;
      if constexpr (kBF16Out) {
        __nv_bfloat16* dd = static_cast<__nv_bfloat16*>(d);
        const float prev = beta != 0.f ? __bfloat162float(dd[o]) : 0.f;
        dd[o] = __float2bfloat16_rn(alpha * s + beta * prev);
      } else {
        float* dd = static_cast<float*>(d);
        const float prev = beta != 0.f ? dd[o] : 0.f;
        dd[o] = alpha * s + beta * prev;
      }
    }
  }
}

template <int M>
void launch_m(const GemmArgs& g, cudaStream_t stream) {
  const dim3 grid{static_cast<unsigned>((g.n + kWarpsPerBlock - 1) / kWarpsPerBlock)};
  const dim3 block{kWarpsPerBlock * 32};
  if (g.out_type == GemmOut::kBF16)
    gemv_kernel<M, true><<<grid, block, 0, stream>>>(g.a, g.b, g.d, g.n, g.k, g.alpha, g.beta);
  else
    gemv_kernel<M, false><<<grid, block, 0, stream>>>(g.a, g.b, g.d, g.n, g.k, g.alpha, g.beta);
}

}  // namespace

bool gemv_applies(const GemmArgs& g) {
  return g.m >= 1 && g.m <= kGemvMaxRows && g.n >= 1 && g.k >= 8 && g.k % 8 == 0 &&
         g.a != nullptr && g.b != nullptr && g.d != nullptr &&
         reinterpret_cast<uintptr_t>(g.a) % 16 == 0 && reinterpret_cast<uintptr_t>(g.b) % 16 == 0 &&
         (g.out_type == GemmOut::kF32 || g.out_type == GemmOut::kBF16) &&
         (g.n + kWarpsPerBlock - 1) / kWarpsPerBlock <= INT32_MAX && g.k <= INT32_MAX;
}

cudaError_t launch_gemv(const GemmArgs& g, cudaStream_t stream) {
  if (!gemv_applies(g)) return cudaErrorInvalidValue;
  switch (g.m) {
    case 1:
      launch_m<1>(g, stream);
      break;
    case 2:
      launch_m<2>(g, stream);
      break;
    case 3:
      launch_m<3>(g, stream);
      break;
    default:
      launch_m<4>(g, stream);
      break;
  }
  return detail::launch_result();
}

}  // namespace kvasir::cuda
