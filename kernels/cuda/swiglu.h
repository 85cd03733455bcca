// kernels/cuda/swiglu.h — out = silu(gate) * up, elementwise.
// silu(g) = g / (1 + exp(-g)) in f32; out in bf16 (the down projection's input).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct SwiGluArgs {
  const float* gate = nullptr;  // [n_rows, n_ff] f32, device
  const float* up = nullptr;    // [n_rows, n_ff] f32
  int64_t n_rows = 0;
  int64_t n_ff = 0;
  // Row strides (elements) of gate and up: n_ff for separate buffers, 2*n_ff
  // when gate and up are the two halves of one fused [n_rows, 2*n_ff] GEMM
  // output (then up = gate + n_ff).
  int64_t in_stride = 0;         // 0 = n_ff
  __nv_bfloat16* out = nullptr;  // [n_rows, n_ff] bf16
};

cudaError_t launch_swiglu(const SwiGluArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
