// kernels/cuda/embedding.h — token embedding gather from a bf16 table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct EmbeddingArgs {
  const __nv_bfloat16* table = nullptr;  // [vocab, dim] bf16, device
  const int32_t* tokens = nullptr;       // [n_tokens] device
  int32_t n_tokens = 0;
  int32_t vocab = 0;
  int32_t dim = 0;
  float* out = nullptr;  // [n_tokens, dim] f32 (the residual stream), device
  // Optional device flag: set to kErrorTokenId if a token is outside
  // [0, vocab); that token's row is written as zeros.
  int32_t* error = nullptr;
};

cudaError_t launch_embedding(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
