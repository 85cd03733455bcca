// kernels/cuda/token_logprob.h — the raw log-softmax of one chosen token per
// row, for rows sampled on the GPU (kernels/cuda/sampling.h): what the CPU
// sampler reports as SampleResult::logprob, logits[token] - logsumexp(logits)
// over the row's sanitised logits (NaN -> -inf, +inf -> the largest finite
// float), before temperature and penalties. -inf when every logit is masked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct TokenLogprobArgs {
  const float* logits = nullptr;    // [n_rows, vocab] f32, device
  const int32_t* tokens = nullptr;  // [n_rows] chosen ids, device (out of range: NaN)
  int32_t n_rows = 0;
  int32_t vocab = 0;
  float* logprobs = nullptr;  // [n_rows] out, device
};

cudaError_t launch_token_logprob(const TokenLogprobArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
