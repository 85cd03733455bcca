// SwiGLU: out = silu(gate) * up, one thread per element (grid-stride).
// expf, not __expf: the CPU reference is within ~1e-7 relative of exact.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu.h"

namespace kvasir::cuda {
namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n_rows, int64_t n_ff,
                              int64_t stride, __nv_bfloat16* out) {
  const int64_t n = n_rows * n_ff;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n_ff, c = i % n_ff;
    const float g = gate[r * stride + c];
    const float u = up[r * stride + c];
    out[i] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  }
}

}  // namespace

cudaError_t launch_swiglu(const SwiGluArgs& a, cudaStream_t stream) {
  const int64_t stride = a.in_stride == 0 ? a.n_ff : a.in_stride;
  if (a.n_rows < 0 || a.n_ff < 0 || stride < a.n_ff) return cudaErrorInvalidValue;
  if (a.n_rows > 0 && a.n_ff > (int64_t(1) << 50) / a.n_rows) return cudaErrorInvalidValue;
  if (a.n_rows == 0 || a.n_ff == 0) return cudaSuccess;
  if (a.gate == nullptr || a.up == nullptr || a.out == nullptr) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  swiglu_kernel<<<detail::grid_for(a.n_rows * a.n_ff, kThreads), kThreads, 0, stream>>>(
      a.gate, a.up, a.n_rows, a.n_ff, stride, a.out);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
