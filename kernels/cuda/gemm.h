// kernels/cuda/gemm.h — bf16 GEMM through cuBLASLt, the layout of a linear
// layer:  D[m, n] = A[m, k] · B[n, k]ᵀ (+ beta · D)   all row-major.
// A = activations (bf16), B = weights as stored in GGUF / nn.Linear (bf16,
// one output feature per row), D = f32 (residual-stream side) or bf16.
// Compute type f32 (CUBLAS_COMPUTE_32F); tensor cores on sm_80+.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvasir::cuda {

enum class GemmOut : int32_t { kF32 = 0, kBF16 = 1 };

struct GemmArgs {
  cublasLtHandle_t handle = nullptr;  // created once per stage (cublasLtCreate)
  const __nv_bfloat16* a = nullptr;   // [m, k] bf16, device
  const __nv_bfloat16* b = nullptr;   // [n, k] bf16
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
};

// cudaErrorInvalidValue for bad args; cudaErrorNotSupported when cuBLASLt
// finds no algorithm; cudaErrorUnknown for another cuBLASLt failure.
cudaError_t launch_gemm(const GemmArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
