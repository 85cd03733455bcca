// kernels/cuda/dequant.h — GGUF weights to bf16, once at load time.
//
// Kvasir keeps GPU weights in bf16 (cuBLASLt GEMMs): each GGUF tensor is
// uploaded raw and expanded on the device. Types: F32, F16, BF16, Q8_0,
// Q4_0, Q4_1 (those the CPU backend computes with; layouts in base/dtype.h).
// Block scales are IEEE half; weights are formed in f32 (d*q, d*q + m) and
// rounded to bf16 once (round to nearest even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/dtype.h"

namespace kvasir::cuda {

struct DequantArgs {
  const void* src = nullptr;  // [n_rows][row_bytes(type, n_cols)] raw GGUF rows, device
  DType type = DType::F32;    // F32, F16, BF16, Q8_0, Q4_0, Q4_1
  int64_t n_rows = 0;
  int64_t n_cols = 0;            // a multiple of the type's block (32 for Q*)
  __nv_bfloat16* dst = nullptr;  // [n_rows, n_cols] bf16, device
};

// cudaErrorInvalidValue on an unsupported type, a bad shape or null pointers.
cudaError_t launch_dequant(const DequantArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
