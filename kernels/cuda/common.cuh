// kernels/cuda/common.cuh — small device helpers shared by the kernels'
// .cu files (reductions, error flags, launch bookkeeping). Private to
// kernels/cuda: not part of any launcher's face.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kvasir::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds at
// least 32 floats of shared memory. blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// Records a malformed-input code; any non-zero value means "malformed".
__device__ __forceinline__ void set_error(int32_t* flag, int32_t code) {
  if (flag != nullptr) atomicExch(flag, code);
}

// The launch's own status: a configuration error of this launch (not a
// sticky error of earlier work, which the caller's next sync reports).
inline cudaError_t launch_result() {
  return cudaGetLastError();
}

// Blocks for n items of `threads` each, capped for grid-stride loops.
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

// Index of the sequence holding packed token t: the s with
// q_start[s] <= t < q_start[s + 1]; -1 if none (a malformed q_start).
__device__ __forceinline__ int find_seq(const int32_t* q_start, int n_seqs, int t) {
  int lo = 0, hi = n_seqs;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (q_start[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  if (n_seqs <= 0 || q_start[lo] > t || q_start[lo + 1] <= t) return -1;
  return lo;
}

}  // namespace kvasir::cuda::detail
