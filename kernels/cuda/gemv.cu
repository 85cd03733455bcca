// Skinny GEMM (kernels/cuda/gemv.h): one warp per output feature n. Each lane
// reads 16 bytes of the weight row per step (8 bf16 or 16 E4M3 weights; the
// warp 512 contiguous bytes), multiplies them with the same columns of each
// of the M activation rows (small, served from L1/L2), and the warp sums its
// lanes at the end. The SwiGLU variant gives a warp two weight rows (gate j
// and up j) and writes silu(g) · u.
#include <cuda_fp8.h>

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

// 16 E4M3 codes → floats (exact: every code is a half, every half a float).
__device__ __forceinline__ void unpack16_e4m3(const uint4& v, float* f) {
  const __nv_fp8x2_storage_t* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&v);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(p[j], __NV_E4M3));
    const float2 t = __half22float2(h);
    f[2 * j] = t.x;
    f[2 * j + 1] = t.y;
  }
}

// Elements of the weight row one 16-byte load covers.
template <bool kFp8>
constexpr int kPerLoad = kFp8 ? 16 : 8;

// acc[mi] += A[mi, chunk i] · w (the chunk's decoded weights), for M rows.
template <int M, bool kFp8>
__device__ __forceinline__ void dot_chunk(const __nv_bfloat16* __restrict__ a, int64_t k, int64_t i,
                                          const float* wf, float* acc) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const uint4* ar = reinterpret_cast<const uint4*>(a + mi * k) + i * (kPerLoad<kFp8> / 8);
#pragma unroll
    for (int h = 0; h < kPerLoad<kFp8> / 8; ++h) {
      float af[8];
      unpack8(__ldg(ar + h), af);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[mi] = fmaf(af[j], wf[h * 8 + j], acc[mi]);
    }
  }
}

// A[0..M) · W[row] summed over the warp (every lane gets the sums).
template <int M, bool kFp8>
__device__ __forceinline__ void row_dots(const __nv_bfloat16* __restrict__ a,
                                         const uint8_t* __restrict__ w, int64_t row, int64_t k,
                                         float* acc) {
  const int lane = threadIdx.x & 31;
  const int64_t row_bytes = kFp8 ? k : 2 * k;
  const uint4* wr = reinterpret_cast<const uint4*>(w + row * row_bytes);
  const int64_t n_loads = row_bytes / 16;
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = 0.f;
#pragma unroll 4
  for (int64_t i = lane; i < n_loads; i += 32) {
    const uint4 wv = __ldg(wr + i);
    float wf[kPerLoad<kFp8>];
    if constexpr (kFp8)
      unpack16_e4m3(wv, wf);
    else
      unpack8(wv, wf);
    dot_chunk<M, kFp8>(a, k, i, wf, acc);
  }
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = detail::warp_sum(acc[mi]);
}

template <int M, bool kFp8, bool kBF16Out>
__global__ void gemv_kernel(const __nv_bfloat16* __restrict__ a, const uint8_t* __restrict__ w,
                            const float* __restrict__ w_scale, void* d, int64_t n, int64_t k,
                            float alpha, float beta) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;
  float acc[M];
  row_dots<M, kFp8>(a, w, row, k, acc);
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const float s = kFp8 ? acc[mi] * w_scale[row] : acc[mi];
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

// n output features; W has 2n rows (gate, then up).
template <int M, bool kFp8>
__global__ void gemv_swiglu_kernel(const __nv_bfloat16* __restrict__ a,
                                   const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                                   __nv_bfloat16* d, int64_t n, int64_t k) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;
  float g[M], u[M];
  row_dots<M, kFp8>(a, w, row, k, g);
  row_dots<M, kFp8>(a, w, n + row, k, u);
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const float gv = kFp8 ? g[mi] * w_scale[row] : g[mi];
    const float uv = kFp8 ? u[mi] * w_scale[n + row] : u[mi];
    d[int64_t(mi) * n + row] = __float2bfloat16_rn(gv / (1.f + expf(-gv)) * uv);
  }
}

template <int M>
void launch_m(const GemmArgs& g, bool swiglu, cudaStream_t stream) {
  const dim3 grid{static_cast<unsigned>((g.n + kWarpsPerBlock - 1) / kWarpsPerBlock)};
  const dim3 block{kWarpsPerBlock * 32};
  const auto* w = static_cast<const uint8_t*>(g.b);
  const bool fp8 = g.b_type == GemmWeight::kE4M3;
  auto* d16 = static_cast<__nv_bfloat16*>(g.d);
  if (swiglu && fp8)
    gemv_swiglu_kernel<M, true><<<grid, block, 0, stream>>>(g.a, w, g.b_scale, d16, g.n, g.k);
  else if (swiglu)
    gemv_swiglu_kernel<M, false><<<grid, block, 0, stream>>>(g.a, w, nullptr, d16, g.n, g.k);
  else if (fp8 && g.out_type == GemmOut::kBF16)
    gemv_kernel<M, true, true>
        <<<grid, block, 0, stream>>>(g.a, w, g.b_scale, g.d, g.n, g.k, g.alpha, g.beta);
  else if (fp8)
    gemv_kernel<M, true, false>
        <<<grid, block, 0, stream>>>(g.a, w, g.b_scale, g.d, g.n, g.k, g.alpha, g.beta);
  else if (g.out_type == GemmOut::kBF16)
    gemv_kernel<M, false, true>
        <<<grid, block, 0, stream>>>(g.a, w, nullptr, g.d, g.n, g.k, g.alpha, g.beta);
  else
    gemv_kernel<M, false, false>
        <<<grid, block, 0, stream>>>(g.a, w, nullptr, g.d, g.n, g.k, g.alpha, g.beta);
}

cudaError_t launch_any(const GemmArgs& g, bool swiglu, cudaStream_t stream) {
  switch (g.m) {
    case 1:
      launch_m<1>(g, swiglu, stream);
      break;
    case 2:
      launch_m<2>(g, swiglu, stream);
      break;
    case 3:
      launch_m<3>(g, swiglu, stream);
      break;
    default:
      launch_m<4>(g, swiglu, stream);
      break;
  }
  return detail::launch_result();
}

}  // namespace

bool gemv_applies(const GemmArgs& g) {
  const bool fp8 = g.b_type == GemmWeight::kE4M3;
  return g.m >= 1 && g.m <= kGemvMaxRows && g.n >= 1 && g.k >= 8 && g.k % (fp8 ? 16 : 8) == 0 &&
         g.a != nullptr && g.b != nullptr && g.d != nullptr &&
         (g.b_type == GemmWeight::kBF16 || (fp8 && g.b_scale != nullptr)) &&
         reinterpret_cast<uintptr_t>(g.a) % 16 == 0 && reinterpret_cast<uintptr_t>(g.b) % 16 == 0 &&
         (g.out_type == GemmOut::kF32 || g.out_type == GemmOut::kBF16) &&
         (g.n + kWarpsPerBlock - 1) / kWarpsPerBlock <= INT32_MAX && g.k <= INT32_MAX;
}

cudaError_t launch_gemv(const GemmArgs& g, cudaStream_t stream) {
  if (!gemv_applies(g)) return cudaErrorInvalidValue;
  return launch_any(g, false, stream);
}

cudaError_t launch_gemv_swiglu(const GemmArgs& g, cudaStream_t stream) {
  if (g.n > INT32_MAX / 2) return cudaErrorInvalidValue;
  GemmArgs twice = g;  // B has 2n rows
  twice.n = 2 * g.n;
  if (!gemv_applies(twice) || g.out_type != GemmOut::kBF16 || g.alpha != 1.f || g.beta != 0.f)
    return cudaErrorInvalidValue;
  return launch_any(g, true, stream);
}

}  // namespace kvasir::cuda
