// Embedding gather: one thread block per token, bf16 table row -> f32.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

__global__ void embedding_kernel(const __nv_bfloat16* table, const int32_t* tokens, int32_t vocab,
                                 int32_t dim, float* out, int32_t* error) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  float* o = out + t * dim;
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorTokenId);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = 0.f;
    return;
  }
  const __nv_bfloat16* row = table + int64_t(id) * dim;
  for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __bfloat162float(row[i]);
}

}  // namespace

cudaError_t launch_embedding(const EmbeddingArgs& a, cudaStream_t stream) {
  if (a.n_tokens < 0 || a.vocab <= 0 || a.dim <= 0) return cudaErrorInvalidValue;
  if (a.n_tokens == 0) return cudaSuccess;
  if (a.table == nullptr || a.tokens == nullptr || a.out == nullptr) return cudaErrorInvalidValue;
  embedding_kernel<<<a.n_tokens, 256, 0, stream>>>(a.table, a.tokens, a.vocab, a.dim, a.out,
                                                   a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
