// RoPE: one thread per (token, head, rotated pair), q and k in one launch.
// The angle is formed exactly as on the CPU (kernels/cpu/rope.cpp):
// (f32(pos) / linear_factor) * inv_freq[i] in f32, then accurate sincosf
// (full-range reduction, not the __sinf intrinsic: positions reach 1e5+).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

namespace kvasir::cuda {
namespace {

__global__ void rope_kernel(float* q, float* k, const int32_t* pos, const float* inv_freq,
                            int32_t n_tokens, int32_t n_q_heads, int32_t n_k_heads,
                            int32_t head_dim, int32_t rot_dim, RopeLayout layout,
                            float linear_factor) {
  const int32_t half = rot_dim / 2;
  const int32_t n_heads = n_q_heads + n_k_heads;
  const int64_t n = int64_t(n_tokens) * n_heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int32_t i = int32_t(idx % half);
    const int32_t h = int32_t(idx / half % n_heads);
    const int64_t t = idx / half / n_heads;
    float* row = h < n_q_heads ? q + (t * n_q_heads + h) * head_dim
                               : k + (t * n_k_heads + (h - n_q_heads)) * head_dim;
    const float angle = (float(pos[t]) / linear_factor) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    const int32_t i0 = layout == RopeLayout::kAdjacent ? 2 * i : i;
    const int32_t i1 = layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + half;
    const float x0 = row[i0], x1 = row[i1];
    row[i0] = x0 * c - x1 * s;
    row[i1] = x0 * s + x1 * c;
  }
}

}  // namespace

cudaError_t launch_rope(const RopeArgs& a, cudaStream_t stream) {
  if (a.n_tokens < 0 || a.n_q_heads < 0 || a.n_k_heads < 0 || a.head_dim <= 0)
    return cudaErrorInvalidValue;
  if (a.rot_dim < 0 || a.rot_dim % 2 != 0 || a.rot_dim > a.head_dim) return cudaErrorInvalidValue;
  if (!(a.linear_factor > 0.f)) return cudaErrorInvalidValue;
  if (a.layout != RopeLayout::kAdjacent && a.layout != RopeLayout::kHalf)
    return cudaErrorInvalidValue;
  if ((a.n_k_heads > 0) != (a.k != nullptr)) return cudaErrorInvalidValue;
  const int64_t n = int64_t(a.n_tokens) * (int64_t(a.n_q_heads) + a.n_k_heads) * (a.rot_dim / 2);
  if (n == 0) return cudaSuccess;
  if (a.q == nullptr && a.n_q_heads > 0) return cudaErrorInvalidValue;
  if (a.pos == nullptr || a.inv_freq == nullptr) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  rope_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
      a.q, a.k, a.pos, a.inv_freq, a.n_tokens, a.n_q_heads, a.n_k_heads, a.head_dim, a.rot_dim,
      a.layout, a.linear_factor);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
