// kernels/cuda/gemm.h — a linear layer through cuBLASLt:
//   D[m, n] = alpha · A[m, k] · B[n, k]ᵀ (+ beta · D)   all row-major.
// A = activations (bf16), B = weights as stored in GGUF / nn.Linear (one
// output feature per row), D = f32 (residual-stream side) or bf16.
// Compute type f32 (CUBLAS_COMPUTE_32F); tensor cores on sm_80+.
//
// Weights are bf16, or FP8 E4M3 with one f32 scale per row of B
// (b_scale[n]: B_real[j, :] = b_scale[j] · B[j, :]). For E4M3:
//   m <= kGemvMaxRows (gemv.h): the skinny kernel reads the FP8 weights and
//     multiplies bf16 activations as they are (weight-only FP8);
//   larger m: each row i of A is quantised to E4M3 with its own scale
//     (fp8_quant.h: a_scale[i] = amax / 448) into fp8.a, cuBLASLt multiplies
//     E4M3 x E4M3 into fp8.prod (f32, unit scales, compute capability 8.9+),
//     and D = alpha · prod[i, j] · a_scale[i] · b_scale[j] (+ beta · D).
// The FP8 scratch (fp8.*) is the caller's; sizes are checked.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvasir::cuda {

enum class GemmOut : int32_t { kF32 = 0, kBF16 = 1 };
enum class GemmWeight : int32_t { kBF16 = 0, kE4M3 = 1 };

// Scratch of an E4M3 GEMM with more than kGemvMaxRows rows (device memory).
struct GemmFp8Scratch {
  uint8_t* a = nullptr;      // [m, k] A quantised per row
  float* a_scale = nullptr;  // [m]
  // [m, n] the unscaled product. May be null when beta is 0 and D is f32:
  // the product is then written to D and rescaled in place.
  float* prod = nullptr;
  size_t a_bytes = 0;  // capacities, checked against m·k, 4·m, 4·m·n
  size_t a_scale_bytes = 0;
  size_t prod_bytes = 0;
};

struct GemmArgs {
  cublasLtHandle_t handle = nullptr;  // created once per stage (cublasLtCreate)
  const __nv_bfloat16* a = nullptr;   // [m, k] bf16, device
  const void* b = nullptr;            // [n, k] bf16 or E4M3 (b_type)
  void* d = nullptr;                  // [m, n] f32 or bf16 (out_type)
  GemmOut out_type = GemmOut::kF32;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f;
  float beta = 0.f;           // 1 accumulates into d (e.g. the residual add)
  void* workspace = nullptr;  // cuBLASLt workspace, device (32 MiB recommended)
  size_t workspace_bytes = 0;
  // Out: the cuBLASLt status of the failing call when the launcher returns
  // cudaErrorUnknown / cudaErrorNotSupported (may be null).
  cublasStatus_t* cublas_status = nullptr;
  GemmWeight b_type = GemmWeight::kBF16;
  const float* b_scale = nullptr;  // E4M3: [n] f32, one scale per row of B
  GemmFp8Scratch fp8;              // E4M3 with m > kGemvMaxRows
};

// cudaErrorInvalidValue for bad args (E4M3 without b_scale, k not a
// multiple of 16, short scratch); cudaErrorNotSupported when cuBLASLt finds
// no algorithm (E4M3 below compute capability 8.9); cudaErrorUnknown for
// another cuBLASLt failure.
cudaError_t launch_gemm(const GemmArgs& args, cudaStream_t stream);

// Whether launch_gemm sends 1..kGemvMaxRows rows to the skinny kernel
// (kernels/cuda/gemv.h): true unless KVASIR_CUDA_NO_GEMV is set (bench/gpu
// compares the two); read once.
bool gemm_skinny_enabled();

}  // namespace kvasir::cuda
