// KV append: one thread block per new token; its threads cover
// n_kv_heads * head_dim elements of K and V. The token's sequence is found
// by binary search over q_start, and every index is checked on the device
// before a write (a malformed batch sets the error flag, writes nothing).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_append.h"

namespace kvasir::cuda {
namespace {

__global__ void kv_append_kernel(GpuKvLayer kv, GpuAttnBatch b, const float* k, const float* v,
                                 int32_t* error) {
  const int32_t t = blockIdx.x;
  const int s = detail::find_seq(b.q_start, b.n_seqs, t);
  if (s < 0) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorBatch);
    return;
  }
  const int64_t pos = int64_t(b.pos0[s]) + (t - b.q_start[s]);
  const int64_t logical = pos / kv.block_size;
  if (pos < 0 || logical >= b.max_blocks) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorPosition);
    return;
  }
  const int32_t block = b.block_tables[int64_t(s) * b.max_blocks + logical];
  if (block < 0 || block >= kv.n_blocks) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorBlockId);
    return;
  }
  const int64_t slot = pos % kv.block_size;
  const int32_t per_token = kv.n_kv_heads * kv.head_dim;
  for (int32_t i = threadIdx.x; i < per_token; i += blockDim.x) {
    const int32_t h = i / kv.head_dim, d = i % kv.head_dim;
    const int64_t off = kv_offset(kv, block, h, slot) + d;
    kv.k[off] = __float2bfloat16_rn(k[int64_t(t) * per_token + i]);
    kv.v[off] = __float2bfloat16_rn(v[int64_t(t) * per_token + i]);
  }
}

}  // namespace

cudaError_t launch_kv_append(const KvAppendArgs& a, cudaStream_t stream) {
  const GpuKvLayer& kv = a.kv;
  const GpuAttnBatch& b = a.batch;
  if (kv.n_blocks < 0 || kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0)
    return cudaErrorInvalidValue;
  if (int64_t(kv.n_kv_heads) * kv.head_dim > (1 << 20)) return cudaErrorInvalidValue;
  if (b.n_seqs < 0 || b.n_tokens < 0 || b.max_blocks < 0) return cudaErrorInvalidValue;
  if (b.n_tokens == 0) return cudaSuccess;
  if (b.n_seqs == 0 || kv.k == nullptr || kv.v == nullptr || a.k == nullptr || a.v == nullptr ||
      b.q_start == nullptr || b.pos0 == nullptr || b.block_tables == nullptr)
    return cudaErrorInvalidValue;
  kv_append_kernel<<<b.n_tokens, 128, 0, stream>>>(kv, b, a.k, a.v, a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
