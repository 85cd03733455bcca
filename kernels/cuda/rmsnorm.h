// kernels/cuda/rmsnorm.h — RMSNorm fused with the residual add.
//
//   if residual:  x[i, :] += residual[i, :]          (x updated in place)
//   out[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight
//
// x is the f32 residual stream; out is bf16, the input of the next GEMM.
// One pass over x per row: the add, the sum of squares (f32, tree reduced)
// and the scaled write. Matches kernels/cpu/norm.h rmsnorm + add_inplace.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct RmsNormArgs {
  float* x = nullptr;               // [n_rows, dim] f32, device (updated when residual is set)
  const float* residual = nullptr;  // [n_rows, dim] f32 or null (no add)
  const float* weight = nullptr;    // [dim] f32
  int64_t n_rows = 0;
  int32_t dim = 0;
  float eps = 1e-5f;
  __nv_bfloat16* out = nullptr;  // [n_rows, dim] bf16 (may be null: only the add)
  float* out_f32 = nullptr;      // [n_rows, dim] f32 alternative output (null if unused)
};

cudaError_t launch_rmsnorm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
