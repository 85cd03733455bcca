// Token mask (kernels/cuda/token_mask.h): one thread per logit of a row,
// rows along grid.y; a masked-out logit becomes -inf.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/token_mask.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void token_mask_kernel(float* logits, const uint32_t* masks, int32_t vocab,
                                  int32_t words) {
  const int64_t row = blockIdx.y;
  const uint32_t* m = masks + row * words;
  float* x = logits + row * vocab;
  for (int32_t id = blockIdx.x * blockDim.x + threadIdx.x; id < vocab;
       id += gridDim.x * blockDim.x) {
    const int32_t w = id >> 5;
    if (w >= words || !((m[w] >> (id & 31)) & 1u)) x[id] = -INFINITY;
  }
}

}  // namespace

cudaError_t launch_apply_token_mask(const TokenMaskArgs& a, cudaStream_t stream) {
  if (a.n_rows < 0 || a.vocab <= 0 || a.words <= 0 || a.n_rows > 65535)
    return cudaErrorInvalidValue;
  if (a.n_rows == 0) return cudaSuccess;
  if (a.logits == nullptr || a.masks == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(detail::grid_for(a.vocab, kThreads, 4096), unsigned(a.n_rows));
  token_mask_kernel<<<grid, kThreads, 0, stream>>>(a.logits, a.masks, a.vocab, a.words);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
