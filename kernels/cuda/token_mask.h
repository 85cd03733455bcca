// kernels/cuda/token_mask.h — structured outputs on the GPU: a grammar's
// token mask applied to rows of logits before they are sampled
// (docs/structured-outputs.md), as vLLM's apply_token_bitmask does.
//
// masks: one row of `words` uint32 per logits row, the grammar engine's
// layout: bit (id % 32) of word (id / 32) is 1 iff token id may come next.
// Every logit whose bit is 0, and every id past the mask (id >= 32 *
// words), becomes -inf; the others are left as they are. A row that must
// not be masked gets all ones (and words * 32 >= vocab). What the CPU
// sampler does for a masked row (stages/sampler.h, apply_token_mask).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct TokenMaskArgs {
  float* logits = nullptr;          // [n_rows, vocab] f32, device, masked in place
  const uint32_t* masks = nullptr;  // [n_rows, words] device
  int32_t n_rows = 0;
  int32_t vocab = 0;
  int32_t words = 0;  // > 0
};

cudaError_t launch_apply_token_mask(const TokenMaskArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
