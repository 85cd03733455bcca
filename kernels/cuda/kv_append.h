// kernels/cuda/kv_append.h — writes a batch's new keys/values into their
// paged blocks (layout: paged_kv_layout.h), rounding f32 to bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {

struct KvAppendArgs {
  GpuKvLayer kv;
  GpuAttnBatch batch;
  const float* k = nullptr;  // [n_tokens, n_kv_heads, head_dim] f32, device
  const float* v = nullptr;  // same shape
  // Optional device flag (kError*): a token whose position or block is out of
  // range is not written.
  int32_t* error = nullptr;
};

cudaError_t launch_kv_append(const KvAppendArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
