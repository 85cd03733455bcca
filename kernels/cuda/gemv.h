// kernels/cuda/gemv.h — the skinny case of kernels/cuda/gemm.h: a linear
// layer for 1..4 activation rows (batch-1..4 decode), where the weights are
// read once and the time is memory bandwidth. cuBLASLt's kernels for m = 1
// reach ~55% of the H200's copy bandwidth on Llama-3-8B shapes; one warp per
// output feature with 16-byte loads streams the weights at close to it.
//   D[m, n] = alpha · A[m, k] · B[n, k]ᵀ + beta · D   all row-major
// A bf16 (activations), B bf16 (weights, one output feature per row),
// D f32 or bf16; f32 accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"

namespace kvasir::cuda {

constexpr int64_t kGemvMaxRows = 4;

// Whether launch_gemv takes these arguments: 1 <= m <= kGemvMaxRows,
// k a multiple of 8 and A, B 16-byte aligned (the kernel's vector loads).
bool gemv_applies(const GemmArgs& args);

// cudaErrorInvalidValue when !gemv_applies(args) or an argument is bad.
cudaError_t launch_gemv(const GemmArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
