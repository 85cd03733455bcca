// kernels/cuda/gemv.h — the skinny case of kernels/cuda/gemm.h: a linear
// layer for 1..4 activation rows (batch-1..4 decode), where the weights are
// read once and the time is memory bandwidth. cuBLASLt's kernels for m = 1
// leave much of the copy bandwidth unused on 8B-class decode shapes
// (docs/measurements/2026-11-29.md);
// one warp per output feature with 16-byte loads streams the weights at
// close to it.
//   D[m, n] = alpha · A[m, k] · B[n, k]ᵀ + beta · D   all row-major
// A bf16 (activations), B bf16 or FP8 E4M3 with a scale per row (weights,
// one output feature per row), D f32 or bf16; f32 accumulation. For E4M3
// the row's dot product over the decoded codes is multiplied by b_scale[j]
// once, at the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"

namespace kvasir::cuda {

constexpr int64_t kGemvMaxRows = 4;

// Whether launch_gemv takes these arguments: 1 <= m <= kGemvMaxRows, k a
// multiple of 8 (bf16) or 16 (E4M3, which needs b_scale) and A, B 16-byte
// aligned (the kernel's vector loads).
bool gemv_applies(const GemmArgs& args);

// cudaErrorInvalidValue when !gemv_applies(args) or an argument is bad.
cudaError_t launch_gemv(const GemmArgs& args, cudaStream_t stream);

// Gate/up projection and SwiGLU in one pass, for the same 1..4 rows: B holds
// 2·n rows (gate rows 0..n-1, then up rows n..2n-1, as the fused gate/up
// weight), and
//   D[i, j] = bf16( silu(g) · u ),  g = A[i]·B[j], u = A[i]·B[n + j]
// (silu(g) = g / (1 + exp(-g)), f32; E4M3: g and u scaled by their rows'
// scales first) — the f32 [m, 2n] product never goes to memory. Needs
// out_type kBF16, alpha 1, beta 0 and what gemv_applies needs (with 2·n
// rows of B); else cudaErrorInvalidValue.
cudaError_t launch_gemv_swiglu(const GemmArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
